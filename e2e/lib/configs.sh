#!/usr/bin/env bash
# Writes the containerd, CNI, kubelet and kube-proxy configs into $STATE. Everything a
# component writes (state, sockets, IPAM, pod volumes) is pointed into $STATE too, so
# down.sh knows exactly what to clean.
set -euo pipefail
source "$(dirname "$0")/common.sh"

mkdir -p "$STATE"/{containerd,cni/net.d,cni/ipam,kubelet,logs,pids}

cat >"$STATE/containerd/config.toml" <<EOT
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
# Plugins that would touch /opt or need absent kernel features.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The machine lacks CAP_SYS_RESOURCE: lowering a child's oom_score_adj would fail.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$STATE/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
EOT

# No masquerade: pods talk to the node and each other, never to the outside.
cat >"$STATE/cni/net.d/10-cc-e2e.conflist" <<EOT
{"cniVersion": "1.0.0", "name": "cc-e2e", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "${POD_CIDR%.*}.10", "gateway": "$NODE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
EOT

# Pods with dnsPolicy Default get this instead of the host's file, whose nameserver is
# off the machine.
echo "nameserver $NO_DNS" >"$STATE/resolv.conf"

# Cluster DNS: only cluster.local and reverse zones exist; any other name is REFUSED,
# never forwarded.
cat >"$STATE/Corefile" <<EOT
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $NODE_IP
    errors
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $STATE/pki/admin.kubeconfig e2e
        pods insecure
    }
}
EOT

cat >"$STATE/kubelet/config.yaml" <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $STATE/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# cgroup v1 without systemd; no swap check; sysctls are restored by down.sh.
cgroupDriver: cgroupfs
failSwapOn: false
protectKernelDefaults: false
clusterDNS: [$CLUSTER_DNS]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
# Images are imported, never pulled: never garbage-collect them. Evict only near the edge:
# the machine is shared and its disk and memory use are not ours to judge.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 2%, imagefs.available: 2%, nodefs.inodesFree: 2%}
serializeImagePulls: false
podLogsDir: $STATE/pod-logs
# Secrets and ConfigMaps reach mounted volumes at a pod's next sync: 10 s instead of the default minute, so that
# a renewed certificate is served sooner (kind and most clusters use 1m; the operator copes with either).
syncFrequency: 10s
EOT

cat >"$STATE/kube-proxy.yaml" <<EOT
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/pki/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: $POD_CIDR
mode: iptables
# NodePorts only on the bridge; no route_localnet; leave the conntrack sysctls alone.
nodePortAddresses: ["$NODE_IP/32"]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOT
