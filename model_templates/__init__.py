"""Data, not code: the profiles (``<profile>/contract.yaml`` and one ``config.pbtxt.j2`` per model), the
parameter schema (``parameters.yaml``) and the Python model sources (``python_models/<kind>/model.py``).

Installed as the package ``repo_builder.model_templates`` (see pyproject.toml) and read through
:func:`repo_builder.paths.templates_dir`.
"""
