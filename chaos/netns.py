"""The run's private network: a bridge in the root namespace and one namespace per node, joined by veths.

Everything has a fixed name with the `ccchaos` prefix, so that `cleanup` can remove it again after any
failure, and may run any number of times. The namespaces get no default route and the host drops anything
from the bridge to another interface, so no packet leaves the machine.
"""

from __future__ import annotations

import subprocess

BRIDGE = "ccchaos0"
VETH_PREFIX = "ccc-v"  # the host ends of the nodes' veths
SUBNET = "10.77.0"  # a private /24 that is routed nowhere on this machine
HOST_IP = f"{SUBNET}.1"
COMMENT = "coordinated-chaos"
# Ours alone: the host's FORWARD chain sees bridged frames (br_netfilter), so let ours pass, and no further.
HOST_RULES = (
    ["-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"],
    ["-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
)


def ns_name(index: int) -> str:
    return f"ccchaos-n{index}"


def node_ip(index: int) -> str:
    return f"{SUBNET}.{11 + index}"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def in_ns(index: int, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh("ip", "netns", "exec", ns_name(index), *argv, check=check)


def available() -> str | None:
    """None if namespaces, veths and bridges can be made here; else the reason they cannot."""
    probe = "ccchaos-probe"
    try:
        sh("ip", "netns", "add", probe)
        sh("ip", "netns", "exec", probe, "iptables", "-L", "INPUT", "-n")
        sh("ip", "netns", "exec", probe, "tc", "qdisc", "show")
    except (RuntimeError, FileNotFoundError) as error:
        return str(error)
    finally:
        sh("ip", "netns", "del", probe, check=False)
    return None


def create(count: int) -> None:
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for rule in reversed(HOST_RULES):
        sh("iptables", "-I", "FORWARD", *rule, "-m", "comment", "--comment", COMMENT)
    for index in range(count):
        ns, host_end = ns_name(index), f"{VETH_PREFIX}{index}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", host_end, "master", BRIDGE)
        sh("ip", "link", "set", host_end, "up")
        in_ns(index, "ip", "addr", "add", f"{node_ip(index)}/24", "dev", "eth0")
        in_ns(index, "ip", "link", "set", "eth0", "up")
        in_ns(index, "ip", "link", "set", "lo", "up")


def namespaces() -> list[str]:
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith("ccchaos-")]


def ns_pids(ns: str) -> list[int]:
    return [int(pid) for pid in sh("ip", "netns", "pids", ns, check=False).stdout.split()]


def destroy() -> None:
    """Remove namespaces, veths, the bridge and the host rules; each step tolerates what is already gone."""
    for ns in namespaces():
        sh("ip", "netns", "del", ns, check=False)  # takes its veth end, and so the pair, with it
    # ... unless a process still lives in a namespace whose name is gone: then the host end stays behind.
    for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if line.count(":") >= 2 else ""
        if name.startswith(VETH_PREFIX):
            sh("ip", "link", "del", name, check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    for rule in HOST_RULES:
        while (
            sh("iptables", "-D", "FORWARD", *rule, "-m", "comment", "--comment", COMMENT, check=False).returncode == 0
        ):
            pass


# -- faults ------------------------------------------------------------------------------------------------


def block(a: int, b: int) -> None:
    """Drop traffic between nodes a and b, both ways (clients on the host still reach both)."""
    in_ns(a, "iptables", "-A", "INPUT", "-s", node_ip(b), "-j", "DROP")
    in_ns(b, "iptables", "-A", "INPUT", "-s", node_ip(a), "-j", "DROP")


def slow(index: int, delay_ms: int, jitter_ms: int) -> str:
    """A slow, lossy link out of node `index`: netem delay where the kernel has it, otherwise (as on the
    machine this was built on, which lacks sch_netem) a tight tbf rate limit, whose queue adds delay, plus
    random inbound loss, whose TCP retransmissions add more."""
    netem = ("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", f"{delay_ms}ms", f"{jitter_ms}ms")
    if in_ns(index, *netem, check=False).returncode == 0:
        return f"netem delay {delay_ms}±{jitter_ms} ms"
    rate = f"{max(64, 20_000 // delay_ms)}kbit"
    in_ns(index, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "16kb", "latency", "1s")
    in_ns(
        index,
        "iptables",
        "-A",
        "INPUT",
        "-s",
        f"{SUBNET}.0/24",
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        "0.1",
        "-j",
        "DROP",
    )
    return f"tbf {rate} + 10% loss"


def heal(count: int) -> None:
    for index in range(count):
        in_ns(index, "iptables", "-F", "INPUT", check=False)
        in_ns(index, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
