"""Which PS serves each PS task's shards now (servers run with --replicas >
1): the task itself, or after a failover its first backup still alive. The
placement of backups is the servers' (partitioner/replica_placement.cc):
the next R-1 PS in the ring, skipping PS on a host already used. The
client learns failovers by asking every PS (GetStats: replicas, and the PS
each knows to have failed over), at most once per MIN_REFRESH_SECS, as the
C++ client does (clients/cpp/cluster_routing.h)."""
import logging
import threading
import time

MIN_REFRESH_SECS = 0.25

_log = logging.getLogger("psrt")


def _host(address):
    host, sep, _ = address.rpartition(":")
    if not sep:
        raise ValueError(f"PS address {address!r} has no port")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def backups_of(addresses, replicas):
    """For each PS task, the tasks holding its backups, in takeover order."""
    hosts = [_host(a) for a in addresses]
    n = len(addresses)
    backups = []
    for primary in range(n):
        used, mine = {hosts[primary]}, []
        for step in range(1, n):
            if len(mine) >= replicas - 1:
                break
            t = (primary + step) % n
            if hosts[t] in used:
                continue
            used.add(hosts[t])
            mine.append(t)
        backups.append(mine)
    return backups


class Routing:
    def __init__(self, addresses):
        self._addresses = list(addresses)
        self._serving = list(range(len(addresses)))
        self.replicas = 0  # as the servers reported (0: not asked yet)
        self._lock = threading.Lock()
        self._last_refresh = float("-inf")

    def serving(self, ps):
        return self._serving[ps]

    def refresh(self, ask_stats):
        """ask_stats(task) -> StatsResponse, or None if that PS does not
        answer. Returns True if the routing changed."""
        with self._lock:
            if time.monotonic() - self._last_refresh < MIN_REFRESH_SECS:
                return False
            n = len(self._addresses)
            answers = [ask_stats(t) for t in range(n)]
            self._last_refresh = time.monotonic()
            answered = [a for a in answers if a is not None]
            if not answered:
                return False
            self.replicas = max(a.replicas for a in answered)
            # Each PS's newest term any answer knows: odd while failed over,
            # even while it serves its own shards (again after a handback).
            terms = [0] * n
            for a in answered:
                for t, term in a.ps_terms.items():
                    if 0 <= t < n:
                        terms[t] = max(terms[t], term)
            failed = {t for t in range(n) if terms[t] % 2 == 1}
            backups = backups_of(self._addresses, max(1, self.replicas))
            changed = False
            for p in range(n):
                serving = p
                if p in failed:
                    serving = next((b for b in backups[p] if b not in failed), p)
                if self._serving[p] != serving:
                    self._serving[p] = serving
                    changed = True
                    if serving == p:
                        _log.warning(
                            "PS %d (%s) serves its shards again (handback)",
                            p,
                            self._addresses[p],
                        )
                    else:
                        _log.warning(
                            "PS %d (%s) failed over: its shards are served by PS %d (%s)",
                            p,
                            self._addresses[p],
                            serving,
                            self._addresses[serving],
                        )
            return changed
