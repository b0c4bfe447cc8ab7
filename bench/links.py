# SPDX-License-Identifier: Apache-2.0
"""Link rates as the benchmark scripts take them (the tc forms ops/netns-cluster passes to tbf), and the
counters of an ops/netns-cluster's links."""
import subprocess

_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bits(rate):
    """Bits per second of a rate such as 100mbit or 1gbit; raises ValueError for anything else."""
    text = rate.lower()
    for unit, factor in _UNITS.items():
        if text.endswith(unit):
            try:
                return float(text[:-len(unit)]) * factor
            except ValueError:
                break
    raise ValueError(f"a rate must look like 100mbit or 1gbit (got '{rate}')")


def _drops(qdisc_stats):
    """The packets dropped, summed over the qdiscs of `tc -s qdisc show` ("(dropped N, ...")."""
    return sum(int(w.split()[1].rstrip(",")) for w in qdisc_stats.split("(")[1:] if w.startswith("dropped"))


def counters(netns_cluster, env, hosts):
    """{"tbf_drops_hosts": packets the tbf queues of hosts 1..HOSTS dropped, "tbf_drops_switch": packets the
    switch's dropped, "tcp_retransmitted": TCP segments the hosts retransmitted} of the ops/netns-cluster named
    by env's PRSGD_NETNS_PREFIX, counted since it came up."""
    def run(*cmd):
        return subprocess.run(list(cmd), env=env, check=True, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE).stdout
    host_drops = retrans = 0
    for h in range(1, hosts + 1):
        host_drops += _drops(run(netns_cluster, "exec", str(h), "tc", "-s", "qdisc", "show", "dev", "eth0"))
        snmp = run(netns_cluster, "exec", str(h), "cat", "/proc/net/snmp").splitlines()
        tcp = [line.split() for line in snmp if line.startswith("Tcp:")]
        retrans += int(tcp[1][tcp[0].index("RetransSegs")])
    switch = run("ip", "netns", "exec", env["PRSGD_NETNS_PREFIX"] + "-sw", "tc", "-s", "qdisc", "show")
    return {"tbf_drops_hosts": host_drops, "tbf_drops_switch": _drops(switch), "tcp_retransmitted": retrans}
