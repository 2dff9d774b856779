"""The engines, one folder each (``refspec/core/engine_registry.py`` lists them).

Each folder's ``__init__.py`` declares its engine as ``ENGINE``
(:class:`refspec.core.engine_registry.Engine`) and holds what only that engine needs: the settings
an arm of it carries and their checks, its launcher and process, the program it runs, and its
``refspec qualify`` preset (arms, reference, what it adds to the source manifest).
:mod:`refspec.engines.loopback_http` is the HTTP loop the engines' own programs share.
"""
