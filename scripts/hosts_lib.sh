# Two "hosts" on one machine for scripts/test_hosts.sh and bench_mpi.sh
# (sourced, not run): network namespaces A and B joined by a veth pair
# (198.18.0.1 and .2, from the benchmarking range 198.18.0.0/15), and an
# rsh agent through which mpirun, started in A, places ranks on both. On
# host B the folder HOSTS_A_ONLY is covered by an empty tmpfs (a mount
# namespace of its own), so a rank there finds none of host A's files.
#
#   hosts_up WORKDIR  set up (returns non-zero with a reason in HOSTS_WHY)
#   hosts_down        kill what runs in the namespaces, delete them (idempotent)
#   hosts_missing     why the hosts cannot be made here (prints nothing if they can)
#   hosts_mpirun ARGS...  mpirun in A over TCP on the veth, 1 rank per host,
#                     under `timeout ${HOSTS_TIMEOUT:-120}`; hosts_mpirun_args
#                     puts the command without a time limit in HOSTS_MPIRUN
#   hosts_procs       "pid name (namespace)" of everything in the namespaces
#   hosts_bytes       "tx rx" byte counters of A's veth end
#   hosts_rate RATE   tbf on both ends ("" removes it): e.g. 1gbit
#
# Needs root, iproute2 with netns, mpirun. Every namespace, the veth and
# the mounts vanish with hosts_down (the veth dies with its namespace).

HOSTS_NS_A=agh-a-$$
HOSTS_NS_B=agh-b-$$
HOSTS_IF=agveth
HOSTS_ADDR_A=198.18.0.1
HOSTS_ADDR_B=198.18.0.2
HOSTS_WHY=
HOSTS_UP=0

# Why the hosts cannot be made here (root, ip netns, mpirun), or "".
hosts_missing() {
    if [ "$(id -u)" != 0 ]; then echo "needs root (network namespaces)"; return; fi
    local c
    for c in ip mpirun timeout unshare mount; do
        command -v "$c" >/dev/null 2>&1 || { echo "$c not found"; return; }
    done
    local probe=agh-probe-$$
    if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add failed (no netns support)"; return; fi
    ip netns del "$probe" 2>/dev/null
}

hosts_up() {
    local work=$1
    HOSTS_WORK=$work
    HOSTS_A_ONLY=$work/a
    mkdir -p "$HOSTS_A_ONLY" || return 1
    HOSTS_UP=1
    ip netns add "$HOSTS_NS_A" && ip netns add "$HOSTS_NS_B" &&
        ip link add "$HOSTS_IF" netns "$HOSTS_NS_A" type veth peer name "$HOSTS_IF" netns "$HOSTS_NS_B" &&
        ip -n "$HOSTS_NS_A" addr add "$HOSTS_ADDR_A/24" dev "$HOSTS_IF" &&
        ip -n "$HOSTS_NS_B" addr add "$HOSTS_ADDR_B/24" dev "$HOSTS_IF" || {
        HOSTS_WHY="could not create the namespaces and the veth pair"
        return 1
    }
    local ns
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        ip -n "$ns" link set lo up && ip -n "$ns" link set "$HOSTS_IF" up || {
            HOSTS_WHY="could not bring the links up"
            return 1
        }
    done
    # Host B: its own mount namespace with host A's folder hidden.
    cat >"$work/hostb.sh" <<HOSTB
#!/bin/sh
mount -t tmpfs -o size=64k hosts-a-only "$HOSTS_A_ONLY" || exit 1
exec /bin/sh -c "\$*"
HOSTB
    # The rsh agent: mpirun calls it as `agent HOST COMMAND...` (like ssh).
    cat >"$work/agent.sh" <<AGENT
#!/bin/sh
host=\$1
shift
case \$host in
$HOSTS_ADDR_A) exec ip netns exec "$HOSTS_NS_A" /bin/sh -c "\$*" ;;
$HOSTS_ADDR_B) exec ip netns exec "$HOSTS_NS_B" unshare --mount --propagation private /bin/sh "$work/hostb.sh" "\$@" ;;
*) echo "agent: unknown host \$host" >&2; exit 255 ;;
esac
AGENT
    chmod +x "$work/agent.sh" "$work/hostb.sh"
    # Both ends report UP once the pair is linked (bounded: 2 s).
    local i
    for i in 1 2 3 4 5 6 7 8 9 10; do
        if ip -n "$HOSTS_NS_A" -o link show "$HOSTS_IF" | grep -q 'state UP' &&
            ip -n "$HOSTS_NS_B" -o link show "$HOSTS_IF" | grep -q 'state UP'; then
            return 0
        fi
        sleep 0.2
    done
    HOSTS_WHY="the veth pair did not come up"
    return 1
}

# Ranks' processes in both namespaces ("pid name" lines).
hosts_procs() {
    local ns p
    [ "$HOSTS_UP" = 1 ] || return 0
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        for p in $(ip netns pids "$ns" 2>/dev/null); do
            echo "$p $(cat /proc/"$p"/comm 2>/dev/null) ($ns)"
        done
    done
}

hosts_down() {
    [ "$HOSTS_UP" = 1 ] || return 0
    local ns p
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        # Only what runs inside our own namespaces: this script's ranks.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    done
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do ip netns del "$ns" 2>/dev/null; done
    HOSTS_UP=0
}

# mpirun inside A, one rank on each host (the agent starts B's daemon),
# over TCP on the veth only. The OOB keepalive (5 s idle, then 3 probes 2 s
# apart) makes mpirun notice a host that stopped answering in ~11 s.
hosts_mpirun_args() {
    HOSTS_MPIRUN=(ip netns exec "$HOSTS_NS_A" mpirun --host "$HOSTS_ADDR_A,$HOSTS_ADDR_B" -np 2
        --mca plm_rsh_agent "$HOSTS_WORK/agent.sh" --mca pml ob1 --mca btl tcp,self
        --mca btl_tcp_if_include "$HOSTS_IF" --mca oob_tcp_if_include "$HOSTS_IF"
        --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2
        --mca oob_tcp_keepalive_probes 3 --bind-to none --allow-run-as-root)
}

# A bounded run (HOSTS_TIMEOUT seconds, default 120).
hosts_mpirun() {
    hosts_mpirun_args
    timeout "${HOSTS_TIMEOUT:-120}" "${HOSTS_MPIRUN[@]}" "$@"
}

hosts_bytes() {
    ip netns exec "$HOSTS_NS_A" cat /sys/class/net/"$HOSTS_IF"/statistics/tx_bytes \
        /sys/class/net/"$HOSTS_IF"/statistics/rx_bytes | tr '\n' ' '
}

hosts_rate() {
    local ns
    for ns in "$HOSTS_NS_A" "$HOSTS_NS_B"; do
        ip netns exec "$ns" tc qdisc del dev "$HOSTS_IF" root 2>/dev/null
        if [ -n "$1" ]; then
            ip netns exec "$ns" tc qdisc add dev "$HOSTS_IF" root tbf rate "$1" \
                burst 256kb latency 50ms || return 1
        fi
    done
}
