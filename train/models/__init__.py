"""The built-in models, in pure numpy: a classifier or a next-token model, and their optimiser.

``classifiers`` (SoftmaxRegression, MLP), ``language`` (NextTokenMLP and the
unigram entropy to judge it by) and ``adam`` (Adam that resumes bit for bit).
"""
