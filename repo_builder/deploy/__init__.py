"""Deployment targets generated from a rendered repository's lock file.

Modules: :mod:`.facts` (the typed facts read from ``repo-builder.lock.json``), :mod:`.options` (the generators'
options and their defaults), :mod:`.kubernetes` (Deployment/Service or LeaderWorkerSet manifests), :mod:`.slurm`
(an sbatch script). The CLI is ``repo-builder deploy kubernetes|slurm`` (repo_builder/commands/deploy.py).
"""
