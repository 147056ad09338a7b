"""The Kopf operator for `CoordinatedCluster` resources (group coordinated.dev, version v1alpha1)."""

GROUP = "coordinated.dev"
VERSION = "v1alpha1"
PLURAL = "coordinatedclusters"
KIND = "CoordinatedCluster"
API_VERSION = f"{GROUP}/{VERSION}"
