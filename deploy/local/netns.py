"""Several "hosts" on one Linux machine: one network namespace per host, each
with its own address on a bridge (veth pairs), and host names resolvable
inside every namespace (algo-1..algo-N, as SageMaker names its hosts).

    net = HostNetwork("psrt", hosts=3)   # needs root and iproute2
    net.create()
    subprocess.run(net.exec_prefix(0) + ["ps_server", ...])   # on algo-1
    net.set_link(2, up=False)            # partition algo-3
    net.destroy()

Names: namespaces <prefix>-h<i>, the host side of host i's veth
<prefix>-v<i>, bridge <prefix>-br (interface names fit Linux's 15 bytes for
prefixes up to 10 characters). `ip netns exec` bind-mounts
/etc/netns/<namespace>/hosts over /etc/hosts, which is how names resolve.
"""
import os
import shutil
import subprocess


def available():
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    # Named for this process: test suites run side by side probe at once
    # (one fixed name failed a CI run here, "File exists").
    name = f"psrt-probe-{os.getpid()}"
    probe = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add failed: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def _ip(*args, check=True):
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


class HostNetwork:
    def __init__(self, prefix, hosts, subnet="10.77.0"):
        if len(prefix) > 10:
            raise ValueError(f"namespace prefix {prefix!r}: at most 10 characters")
        self.prefix, self.hosts, self.subnet = prefix, hosts, subnet
        self.bridge = f"{prefix}-br"

    def namespace(self, i):
        return f"{self.prefix}-h{i + 1}"

    def veth(self, i):
        return f"{self.prefix}-v{i + 1}"

    @staticmethod
    def hostname(i):
        return f"algo-{i + 1}"

    def address(self, i):
        return f"{self.subnet}.{i + 1}"

    def exec_prefix(self, i):
        return ["ip", "netns", "exec", self.namespace(i)]

    def create(self):
        self.destroy()  # leftovers of a run that was killed
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{self.address(i)} {self.hostname(i)}\n" for i in range(self.hosts)
        )
        for i in range(self.hosts):
            ns = self.namespace(i)
            _ip("netns", "add", ns)
            _ip("link", "add", self.veth(i), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", self.veth(i), "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            with open(f"/etc/netns/{ns}/hosts", "w") as f:
                f.write(hosts_file)

    def set_link(self, i, up):
        """Connects (up) or cuts (down) host i from the others."""
        _ip("link", "set", self.veth(i), "up" if up else "down")

    def destroy(self):
        for i in range(self.hosts):
            ns = self.namespace(i)
            _ip("link", "del", self.veth(i), check=False)
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
