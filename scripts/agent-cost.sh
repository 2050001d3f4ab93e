#!/usr/bin/env bash
# agent-cost.sh — measure what `gpuchaos agent` itself costs: CPU time per
# wall time and resident memory, read from /proc while it samples and a
# scraper polls /metrics.
#
# Usage: scripts/agent-cost.sh [-b BINARY] [-d SECONDS] [-s SCRAPE_SECONDS] [-- AGENT ARGS...]
#   -b  gpuchaos binary (default bin/gpuchaos)
#   -d  measured window in seconds, after the agent is healthy (default 60)
#   -s  scrape /metrics every this many seconds during the window (default 15,
#       Prometheus' usual interval; 0 = never)
#   agent args default to: --listen 127.0.0.1:9400 --interval 1s
#
# Prints one line per figure and a final JSON line:
#   {"wall_s":…,"cpu_s":…,"user_s":…,"sys_s":…,"cpu_pct_of_one_core":…,"rss_mib":…,"max_rss_mib":…,"scrapes":…}
# cpu is utime+stime of the agent over the window (from /proc/PID/stat);
# max_rss is VmHWM, the peak resident set since the agent started (start-up
# included), rss is VmRSS at the end.
set -euo pipefail

bin=bin/gpuchaos
dur=60
scrape=15
while getopts "b:d:s:" o; do
	case $o in
	b) bin=$OPTARG ;;
	d) dur=$OPTARG ;;
	s) scrape=$OPTARG ;;
	*) sed -n '2,17p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--listen 127.0.0.1:9400 --interval 1s)

listen=127.0.0.1:9400
for ((i = 0; i < ${#args[@]}; i++)); do
	[ "${args[$i]}" = "--listen" ] && listen=${args[$((i + 1))]}
done
case $listen in :*) listen=127.0.0.1$listen ;; esac

# fetch URL: curl where there is one, else Python's urllib.
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS --max-time 5 "$1"
	else
		python3 -c 'import sys, urllib.request as u; sys.stdout.buffer.write(u.urlopen(sys.argv[1], timeout=5).read())' "$1"
	fi
}

log=$(mktemp)
"$bin" agent "${args[@]}" >"$log" 2>&1 &
pid=$!
cleanup() {
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	rm -f "$log"
}
trap cleanup EXIT

# Wait for the agent to be up (the twin warms up first; NVML opens fast).
for _ in $(seq 1 600); do
	if fetch "http://$listen/healthz" >/dev/null 2>&1; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "agent exited:" >&2
		cat "$log" >&2
		exit 1
	fi
	sleep 0.1
done
fetch "http://$listen/healthz" >/dev/null || { echo "agent not healthy" >&2; cat "$log" >&2; exit 1; }

tck=$(getconf CLK_TCK)
# Fields 14 and 15 of /proc/PID/stat (after the parenthesised command):
# user and system time. The split says where the cost is: system time is
# NVML's ioctls into the driver, user time is NVML and Go.
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat"; }
user_ticks() { awk '{ sub(/^.*\) /, ""); print $12 }' "/proc/$pid/stat"; }
# kib NAME prints a /proc/PID/status field in KiB, 0 where the kernel
# (gVisor, say) does not report it.
kib() { awk -v k="$1" '$1 == k":" { v = $2 } END { print v + 0 }' "/proc/$pid/status"; }

# Arithmetic in awk: bc is not on every machine.
calc() { awk "BEGIN { printf \"%.6f\", ($1) }"; }
now_s() { date +%s.%N; }

c0=$(cpu_ticks)
u0=$(user_ticks)
t0=$(now_s)
scrapes=0
end=$(calc "$t0 + $dur")
next=$t0
while :; do
	now=$(now_s)
	[ "$(calc "$now >= $end")" != 0.000000 ] && break
	if [ "$scrape" != 0 ] && [ "$(calc "$now >= $next")" != 0.000000 ]; then
		fetch "http://$listen/metrics" >/dev/null && scrapes=$((scrapes + 1))
		next=$(calc "$next + $scrape")
	fi
	sleep 0.2
done
c1=$(cpu_ticks)
u1=$(user_ticks)
t1=$(now_s)
rss=$(kib VmRSS)
hwm=$(kib VmHWM)

wall=$(calc "$t1 - $t0")
cpu=$(calc "($c1 - $c0) / $tck")
user=$(calc "($u1 - $u0) / $tck")
sys=$(calc "$cpu - $user")
pct=$(calc "100 * $cpu / $wall")
rss_mib=$(calc "$rss / 1024")
hwm_mib=$(calc "$hwm / 1024")
printf 'agent:        %s agent %s\n' "$bin" "${args[*]}"
printf 'wall:         %.1f s\n' "$wall"
printf 'cpu:          %.2f s (%.3f %% of one core; user %.2f s, system %.2f s)\n' "$cpu" "$pct" "$user" "$sys"
printf 'rss now:      %.1f MiB\n' "$rss_mib"
printf 'max rss:      %.1f MiB (VmHWM)\n' "$hwm_mib"
printf 'scrapes:      %d\n' "$scrapes"
printf '{"wall_s":%.1f,"cpu_s":%.2f,"user_s":%.2f,"sys_s":%.2f,"cpu_pct_of_one_core":%.3f,"rss_mib":%.1f,"max_rss_mib":%.1f,"scrapes":%d}\n' \
	"$wall" "$cpu" "$user" "$sys" "$pct" "$rss_mib" "$hwm_mib" "$scrapes"
