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


def _sent(qdisc_stats):
    """(bytes, packets) the qdiscs of `tc -s qdisc show` sent, summed ("Sent B bytes P pkt")."""
    total_bytes = packets = 0
    for line in qdisc_stats.splitlines():
        words = line.split()
        if words[:1] == ["Sent"] and len(words) >= 5:
            total_bytes += int(words[1])
            packets += int(words[3])
    return total_bytes, packets


def counters(netns_cluster, env, hosts):
    """The counters of the ops/netns-cluster named by env's PRSGD_NETNS_PREFIX, counted since it came up:
    "tbf_drops_hosts" (packets the tbf queues of hosts 1..HOSTS dropped), "tbf_drops_switch" (the switch's),
    "tcp_retransmitted" and "tcp_out_segments" (TCP segments the hosts retransmitted and sent),
    "link_bytes" and "link_packets" (what the hosts' tbf queues sent; a packet there can be a GSO packet of
    several segments) and "loopback_bytes" (what the hosts sent to themselves)."""
    def run(*cmd):
        return subprocess.run(list(cmd), env=env, check=True, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE).stdout
    host_drops = retrans = out_segs = link_bytes = link_packets = lo_bytes = 0
    for h in range(1, hosts + 1):
        # One process per host: its qdisc, its TCP counters and its loopback bytes, split at the marker lines.
        qdisc, snmp, lo = run(netns_cluster, "exec", str(h), "sh", "-c",
                              "tc -s qdisc show dev eth0; echo '#--'; cat /proc/net/snmp; echo '#--'; "
                              "cat /sys/class/net/lo/statistics/tx_bytes").split("#--\n")
        host_drops += _drops(qdisc)
        sent = _sent(qdisc)
        link_bytes += sent[0]
        link_packets += sent[1]
        tcp = [line.split() for line in snmp.splitlines() if line.startswith("Tcp:")]
        retrans += int(tcp[1][tcp[0].index("RetransSegs")])
        out_segs += int(tcp[1][tcp[0].index("OutSegs")])
        lo_bytes += int(lo)
    switch = run("ip", "netns", "exec", env["PRSGD_NETNS_PREFIX"] + "-sw", "tc", "-s", "qdisc", "show")
    return {"tbf_drops_hosts": host_drops, "tbf_drops_switch": _drops(switch), "tcp_retransmitted": retrans,
            "tcp_out_segments": out_segs, "link_bytes": link_bytes, "link_packets": link_packets,
            "loopback_bytes": lo_bytes}


def since(before, after):
    """The counts of `after` minus those of `before` (two counters() of one cluster)."""
    return {k: after[k] - before[k] for k in after}
