#!/bin/sh
# pinned.sh runs a command in the closest shape one machine gives to
# Postgres on a host of its own: Postgres (its postmaster and every process
# it has forked, and so every backend it forks later) on one CPU, the
# command and whatever it starts (idem-bench's idemds) on another. At the
# end, whatever the command's exit, Postgres's processes get back the CPUs
# the postmaster had before.
#
#   cmd/idem-bench/pinned.sh DATABASE_URL COMMAND [ARG]...
#
# PG_CPU (default 1) and LOAD_CPU (default 0) choose the two CPUs. Postgres
# must run on this machine, psql must reach it at DATABASE_URL, and changing
# its processes' CPUs takes root or Postgres's own user.
set -eu

if [ $# -lt 2 ]; then
	echo "usage: $0 DATABASE_URL COMMAND [ARG]..." >&2
	exit 2
fi
url=$1
shift
pg_cpu=${PG_CPU:-1}
load_cpu=${LOAD_CPU:-0}

cpus=$(nproc)
if [ "$cpus" -lt 2 ]; then
	echo "pinned.sh: $cpus CPU available here (nproc); the pinned topology needs two, one for Postgres and one for the load and idemd" >&2
	exit 1
fi
if [ "$pg_cpu" = "$load_cpu" ]; then
	echo "pinned.sh: PG_CPU and LOAD_CPU are both $pg_cpu; give Postgres and the load different CPUs" >&2
	exit 1
fi

# The checkpointer runs as long as the postmaster, and is its child.
checkpointer=$(psql "$url" -X -Atc "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'") || {
	echo "pinned.sh: psql could not ask Postgres at the database URL for its checkpointer" >&2
	exit 1
}
postmaster=$(sed 's/^.*) //' "/proc/$checkpointer/stat" 2>/dev/null | cut -d' ' -f2) || true
if [ -z "$postmaster" ] || [ "$(cat "/proc/$postmaster/comm" 2>/dev/null)" != postgres ]; then
	echo "pinned.sh: Postgres's processes are not on this machine (or not in this pid namespace): its checkpointer is pid $checkpointer there" >&2
	exit 1
fi
before=$(taskset -pc "$postmaster" | sed 's/.*: //')

# pin gives the postmaster and each of its children the CPUs $1. A child
# may exit between pgrep and taskset.
pin() {
	taskset -apc "$1" "$postmaster" >/dev/null
	for p in $(pgrep -P "$postmaster"); do
		taskset -apc "$1" "$p" >/dev/null 2>&1 || true
	done
}
restore() {
	pin "$before" || echo "pinned.sh: could not give Postgres back CPUs $before: run taskset -apc $before on pid $postmaster and its children" >&2
}

trap restore EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pin "$pg_cpu"
echo "pinned.sh: Postgres (postmaster $postmaster and its processes) on CPU $pg_cpu, until now on $before; $1 on CPU $load_cpu" >&2
taskset -c "$load_cpu" "$@"
