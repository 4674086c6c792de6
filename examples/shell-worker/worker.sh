#!/usr/bin/env bash
# worker.sh: an idem worker in bash that uses nothing but the idem CLI.
#
# It takes job keys as arguments, or one per line on stdin, and for each key:
# claims it, performs the side effect (it appends "charged KEY" to $OUT),
# heartbeats while that runs, and completes the job with a result. Run as many
# copies at once as you like, on the same keys: each side effect happens once.
#
#   ./worker.sh order-1 order-2
#   seq -f 'order-%g' 20 | ./worker.sh
#
# What it does with each answer of idem claim (its exit code):
#   0  ACQUIRED     run the side effect, then idem complete (or idem fail)
#   10 IN_PROGRESS  another worker is on it: put the key aside, try it later
#   11 COMPLETED    done before: print the stored result, do nothing
#   12 FAILED       failed for good before: do nothing
# and of idem complete: 14 LEASE_LOST means another worker took the job over
# after this one's lease ran out; its outcome stands.
#
# stdout gets one line per key: "KEY: RESULT", with " (replayed)" when the
# job was done before. Messages go to stderr. The exit status is 0 when every
# key is done, 1 otherwise.
#
# Settings, from the environment: IDEM_ADDR, IDEM_TOKEN and the other IDEM_*
# variables of idem itself, and these:
NAMESPACE=${NAMESPACE:-shell_jobs}     # the jobs' namespace
OUT=${OUT:-side-effects.log}           # the file the side effect appends to
LEASE_TTL=${LEASE_TTL:-30s}            # the lease of each claim
HEARTBEAT_EVERY=${HEARTBEAT_EVERY:-10} # seconds between heartbeats: a third of the lease
WORK_SECONDS=${WORK_SECONDS:-0}        # how long the side effect takes
RETRY_DELAY=${RETRY_DELAY:-0.5}        # seconds between rounds of keys put aside
MAX_ROUNDS=${MAX_ROUNDS:-40}           # rounds before giving up on keys in progress

# Not -e: idem's exit codes are answers to branch on, not failures.
set -uo pipefail

# idem's exit codes (idem --help lists them all).
readonly ACQUIRED=0 IN_PROGRESS=10 COMPLETED=11 FAILED=12 LEASE_LOST=14 UNAVAILABLE=19

log() { printf 'worker %s: %s\n' "$$" "$*" >&2; }

# charge is the irreversible side effect; it prints the result to store.
charge() {
	local key=$1 token=$2
	sleep "$WORK_SECONDS"
	printf 'charged %s\n' "$key" >>"$OUT" || return
	printf 'receipt-%s-token-%s' "$key" "$token"
}

# heartbeat extends the lease every HEARTBEAT_EVERY seconds until it is
# killed. Run it in the background.
heartbeat() {
	local key=$1 token=$2 sleeper
	trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
	while :; do
		sleep "$HEARTBEAT_EVERY" &
		sleeper=$!
		wait "$sleeper"
		idem heartbeat -q -n "$NAMESPACE" -k "$key" --lease-token "$token" --lease-ttl "$LEASE_TTL" || exit
	done
}

# run_job performs the side effect under the lease token and records the
# outcome.
run_job() {
	local key=$1 token=$2 result hb rc try
	heartbeat "$key" "$token" &
	hb=$!
	result=$(charge "$key" "$token")
	rc=$?
	kill "$hb" 2>/dev/null
	wait "$hb" 2>/dev/null
	if ((rc != 0)); then
		# Hand the job back, so that the next delivery runs it again.
		idem fail -q -n "$NAMESPACE" -k "$key" --lease-token "$token" --error "charge exited with $rc" --retryable
		log "$key: the side effect failed (exit $rc); released it for a retry"
		return 1
	fi
	# Complete is safe to repeat with the same token, so retry it while idemd
	# is unavailable: until it succeeds, a later delivery may run the job again.
	for try in 1 2 3 4 5; do
		idem complete -q -n "$NAMESPACE" -k "$key" --lease-token "$token" --result "$result"
		rc=$?
		((rc == UNAVAILABLE)) || break
		sleep "$try"
	done
	case $rc in
	0)
		printf '%s: %s\n' "$key" "$result"
		return 0
		;;
	"$LEASE_LOST")
		log "$key: lost the lease before completing (another worker took it over, and its outcome stands); the side effect may have run twice: make --lease-ttl longer than the work"
		return 0
		;;
	*)
		log "$key: complete failed with exit code $rc; the side effect ran but is not recorded"
		return 1
		;;
	esac
}

# process handles one key. It returns 0 when the key is done (here or
# earlier), IN_PROGRESS when another worker holds it, 1 otherwise.
process() {
	local key=$1 out rc
	# On ACQUIRED stdout is the lease token; on COMPLETED, the stored result.
	out=$(idem claim -q -n "$NAMESPACE" -k "$key" --lease-ttl "$LEASE_TTL" --result-out -)
	rc=$?
	case $rc in
	"$ACQUIRED") run_job "$key" "$out" ;;
	"$IN_PROGRESS")
		log "$key: in progress in another worker; trying it later"
		return "$IN_PROGRESS"
		;;
	"$COMPLETED")
		printf '%s: %s (replayed)\n' "$key" "$out"
		return 0
		;;
	"$FAILED")
		log "$key: failed for good earlier; not running it (idem lookup -n $NAMESPACE -k $key shows the error)"
		return 0
		;;
	*)
		log "$key: claim failed with exit code $rc; leaving it to a later delivery"
		return 1
		;;
	esac
}

keys=()
if (($# > 0)); then
	keys=("$@")
else
	while IFS= read -r line || [[ -n $line ]]; do
		[[ -n $line ]] && keys+=("$line")
	done
fi

status=0
round=1
while ((${#keys[@]} > 0)); do
	later=()
	for key in "${keys[@]}"; do
		process "$key"
		case $? in
		0) ;;
		"$IN_PROGRESS") later+=("$key") ;;
		*) status=1 ;;
		esac
	done
	keys=(${later[@]+"${later[@]}"})
	if ((${#keys[@]} > 0)); then
		if ((round >= MAX_ROUNDS)); then
			log "giving up after $round rounds on keys still in progress elsewhere: ${keys[*]}"
			exit 1
		fi
		round=$((round + 1))
		sleep "$RETRY_DELAY"
	fi
done
exit "$status"
