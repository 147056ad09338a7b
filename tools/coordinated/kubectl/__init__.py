"""The kubectl plugin `kubectl-coordinated`: `kubectl coordinated status|kv|snapshot|restore|recover|pause|resume`.

It finds a CoordinatedCluster's pods and Secrets through the Kubernetes API (kube.py), reaches the sidecars
through port-forwards that the API server opens (tunnel.py), and runs the command-line client's own commands
(`coordinated.ctl`) over them. docs/cli.md ("The kubectl plugin") is the user's guide.
"""
