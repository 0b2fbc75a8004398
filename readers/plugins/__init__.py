"""Named readers and models: the registry that ``--reader`` and ``--model`` look names up in.

``registry`` (entry points, built-in names, ``module:attribute``) and
``modules`` (which bare names may be a module, and why a user's file is not
found).
"""
