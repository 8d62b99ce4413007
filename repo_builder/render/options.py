"""Import shim: :class:`RenderOptions` lives in :mod:`repo_builder.render_options` (import-light, so the CLI
builds ``render``'s parameters from its fields without importing the render package)."""

from ..render_options import RenderOptions as RenderOptions
