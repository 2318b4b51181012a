"""A ps_server's data plane never takes the port its gRPC is configured
on: the data plane binds a port the kernel picks before gRPC listens, and
in a test one PS failed to start ("cannot listen on 0.0.0.0:45565", its
data plane at 127.0.0.1:45565). A namespace whose only ephemeral port is
the gRPC port makes that pick certain."""
import os
import subprocess

import netns
from netns_util import ROOT, needs_netns

PORT = 45565


@needs_netns
def test_the_data_plane_leaves_the_grpc_port_to_grpc():
    hosts = netns.HostNetwork("psrtport", 1, "10.97.9")
    hosts.create()
    try:
        run_here = hosts.exec_prefix(0)
        subprocess.run(
            [*run_here, "sysctl", "-q", "-w", f"net.ipv4.ip_local_port_range={PORT} {PORT}"],
            check=True,
        )
        server = subprocess.Popen(
            [
                *run_here,
                os.path.join(ROOT, "ps_server/ps_server"),
                f'--cluster={{"cluster":{{"ps":["127.0.0.1:{PORT}"]}}}}',
                "--task_index=0",
                "--metrics_port=0",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines = []
        for line in server.stdout:
            lines.append(line)
            if "serving on port" in line or "cannot listen" in line:
                break
        server.terminate()
        server.communicate(timeout=30)
        out = "".join(lines)
        assert f"serving on port {PORT}" in out, out
        # No other port to pick: the data plane stays off and says why.
        assert "pushes and pulls travel over gRPC" in out, out
    finally:
        hosts.destroy()
