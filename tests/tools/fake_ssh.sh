#!/bin/sh
# Stands in for ssh in the launcher tests: skips ssh's options and the host name, then runs
# the remote command with sh on this machine — so the whole remote path (quoting, the
# secret on stdin, TERM/KILL control lines, end-of-input kill) runs without an sshd.
# FAKE_SSH_NETNS="host1=ns1 host2=ns2" runs a host's command inside that network namespace,
# so each "host" has its own network stack.
host=""
while [ $# -gt 1 ]; do
  case "$1" in
    -o|-p|-i|-l) shift 2 ;;
    -*) shift ;;
    *) host="$1"; echo "$1" >> "${FAKE_SSH_LOG:-/dev/null}"; shift ;;
  esac
done
for pair in ${FAKE_SSH_NETNS:-}; do
  if [ "${pair%%=*}" = "$host" ]; then exec ip netns exec "${pair#*=}" sh -c "$1"; fi
done
exec sh -c "$1"
