"""Distributed RetinaNet trainer for the gpuops.training Ansible collection."""

__version__ = "0.1.0"
