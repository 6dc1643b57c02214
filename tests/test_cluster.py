"""Hardware profiles, presets, routes, cluster files."""

import pytest

from orchestrator.errors import ConfigError
from orchestrator.hardware.presets import load_cluster_file, multi_host_worker, sim_1cpu_4gpu, sim_hetero_cluster
from orchestrator.hardware.profiles import PROFILES


def test_profiles_are_labelled():
    for name in ("K80 (datasheet)", "V100 (datasheet)", "A100 (datasheet)", "H100 (datasheet)", "H200 (datasheet)"):
        assert name in PROFILES
    assert all(n.endswith(("(datasheet)", "(measured)")) for n in PROFILES)


def test_reference_preset_routes_through_shared_pcie():
    w = sim_1cpu_4gpu().workers[0]
    g = [d for d in w.devices if d.kind == "gpu"]
    assert len(g) == 4 and sum(d.kind == "cpu" for d in w.devices) == 1
    hops = w.route(g[0], g[1])
    assert [w.topology.channel(k) for k in hops] == ["host0/pcie-switch0:up", "host0/pcie-switch0:down"]
    assert w.route(g[0], w.devices[0])[0][1] == "host0:mem"


def test_hetero_cluster_has_unequal_hosts_and_network_routes():
    c = sim_hetero_cluster()
    assert len(c.workers) == 3 and len({d.profile for w in c.workers for d in w.devices if d.kind == "gpu"}) == 3
    w = multi_host_worker(c)
    a, b = w.device("host0/gpu:0"), w.device("host2/gpu:1")
    assert [w.topology.kinds[k] for k in w.route(a, b)] == ["pcie", "network", "pcie"]
    assert [w.topology.kinds[k] for k in w.route(a, w.device("host0/gpu:1"))] == ["nvlink"]
    assert w.topology is c.workers[0].topology and len(w.links) == len(w.topology.links)   # one table, viewed
    assert all(k[0].startswith("host1") and k[1].startswith("host1") for k in c.workers[1].links)
    assert w.topology.channel(("host0:mem", "host2:mem")) == "host0/nic:out"


def test_cluster_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("name: lab\nhosts:\n  - {name: h0, cpu: 'Xeon Platinum 8380 (datasheet)', gpu: 'A100 (datasheet)', gpus: 2}\n")
    c = load_cluster_file(f)
    assert c.name == "lab" and len(c.workers[0].devices) == 3
    for text, words in [("hosts: [", "not valid YAML"), ("name: x\n", "non-empty 'hosts'"),
                        ("hosts:\n  - {cpu: 'Xeon Platinum 8380 (datasheet)', gpus: 2}\n", "no 'gpu' profile"),
                        ("hosts:\n  - {cpu: 'Pentium'}\n", "unknown device profile 'Pentium'"),
                        ("hosts:\n  - {cpu: 'Xeon Platinum 8380 (datasheet)', gpu: 'A100 (datasheet)', gpus: -2}\n",
                         "hosts[0].gpus=-2 must be a whole number >= 0"),
                        ("hosts:\n  - {cpu: 'Xeon Platinum 8380 (datasheet)', cpus: 0}\n", "hosts[0].cpus=0 must be a whole number >= 1"),
                        ("hosts:\n  - {cpu: 'Xeon Platinum 8380 (datasheet)', pcie_switch_per: -1}\n",
                         "hosts[0].pcie_switch_per=-1 must be a whole number >= 0"),
                        ("hosts:\n  - {cpu: 'Xeon Platinum 8380 (datasheet)', extra_key: 5}\n", "hosts[0]: unknown key 'extra_key'"),
                        ("hosts:\n  - {name: h0, cpu: 'Xeon Platinum 8380 (datasheet)'}\n"
                         "  - {name: h0, cpu: 'Xeon Platinum 8380 (datasheet)'}\n", "hosts[1]: a second host named 'h0'")]:
        f.write_text(text)
        with pytest.raises(ConfigError) as exc:
            load_cluster_file(f)
        assert words in str(exc.value) and str(f) in str(exc.value) and "\n" not in str(exc.value)


def test_one_parser_for_the_units_users_write():
    """Gbit/s keys (hardware.network) and GB/s keys (links, cluster files) differ by 8; both land in bytes/s,
    and a bad value is one line naming the key."""
    from orchestrator.hardware.links import ConstantLink
    from orchestrator.hardware.units import in_unit, parse_bandwidth, parse_latency_us, parse_rate

    assert parse_bandwidth(10, "Gbit/s", "k") == 1.25e9 and parse_bandwidth(10, "GB/s", "k") == 1e10
    assert in_unit(1.25e9, "Gbit/s") == 10.0 and parse_latency_us(50, "k") == pytest.approx(5e-5)
    assert parse_rate("1gbit") == 1.25e8 == parse_rate("125mbps")
    with pytest.raises(ConfigError, match=r"^hardware.x.bandwidth_GBps=0 must be > 0$"):
        parse_bandwidth(0, "GB/s", "hardware.x.bandwidth_GBps")
    with pytest.raises(ConfigError, match="latency_us='soon' is not a number"):
        parse_latency_us("soon", "latency_us")
    w = multi_host_worker(sim_hetero_cluster())          # a device link is a ConstantLink in the topology
    link = w.links[w.route(w.device("host0/gpu:0"), w.device("host2/gpu:1"))[1]]
    assert isinstance(link, ConstantLink) and link.time(1e9) == link.latency_s + 1e9 / link.bandwidth


def test_an_adapters_cluster_with_no_sense_in_it_is_one_line_naming_the_adapter():
    """A plugin adapter's figures: a negative FLOP rate, memory or link bandwidth (a ZeroDivisionError in the
    list kernel, a 'does not fit by 0.0 MiB', or negative times, before), a device named twice, no workers, not a
    Cluster at all: one line each."""
    from orchestrator.errors import PluginError
    from orchestrator.hardware.cluster import Cluster, Device, Worker, checked
    from orchestrator.hardware.links import ConstantLink

    for key, value in (("peak_flops", -1e12), ("memory_bytes", -5), ("mem_bandwidth", float("nan"))):
        with pytest.raises(ConfigError, match=f"device 'gpu:0': {key}=.* must be a number > 0"):
            Device("gpu:0", "gpu", **{key: value})
    for bw, lat in ((0.0, 0.0), (-1e9, 0.0), (1e9, -1.0)):
        with pytest.raises(ConfigError, match="a link needs a bandwidth > 0 bytes/s and a latency >= 0 s"):
            ConstantLink(bw, lat)
    two = Worker("w", [Device("gpu:0", "gpu"), Device("gpu:0", "gpu")])
    for cluster, words in (({"workers": []}, "cluster\\(\\) returned dict"), (Cluster("c", [], True), "the cluster has no workers"),
                           (Cluster("c", [two], True), "worker 'w' names device 'gpu:0' twice"),
                           (Cluster("c", [Worker("v", [])], True), "worker 'v' has no devices")):
        with pytest.raises(PluginError, match=f"hardware=mine: {words}"):
            checked(cluster, "mine")
    one = Cluster("c", [Worker("w", [Device("gpu:0", "gpu")])], True)
    assert checked(one, "mine") is one


def test_a_placement_on_one_of_several_hosts_says_the_others_are_unused_and_hosts_all_uses_them(tmp_path):
    import json

    from conftest import run_inprocess, store_runs

    out = run_inprocess(tmp_path, "+placer=greedy", "model=nmt", "hardware=sim_hetero_cluster")
    assert out.returncode == 0, out.stderr
    assert "WARNING:  placed on worker-host0 only; no sync strategy uses the other workers: worker-host1" in out.stdout
    assert "objective: step (auto; one training step)" in out.stdout
    out = run_inprocess(tmp_path, "+placer=greedy", "model=nmt", "hardware=sim_hetero_cluster", "placement.hosts=all",
                        "placement.objective=pipeline")
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stdout and "time per batch of 64 samples" in out.stdout, out.stdout
    run = store_runs(tmp_path)[0]
    assert run.data.tags["placement.worker"] == "all" and "placement.unused_workers" not in run.data.tags
    placed = json.loads(max(tmp_path.rglob("placement.json"), key=lambda p: p.stat().st_mtime).read_text())
    assert len({d.split("/")[0] for d in placed["devices"]}) == 3            # every host's devices were offered
    # the expert is also judged on each host alone: the baseline is the best of those and the placement across all
    assert run.data.tags["placement.baseline"].startswith("expert placement on worker-host"), run.data.tags["placement.baseline"]
    out = run_inprocess(tmp_path, "+placer=greedy", "+sync=delay", "hardware=sim_hetero_cluster", "placement.hosts=all")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "placement.hosts=all" in out.stderr, out.stderr
