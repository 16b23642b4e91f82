#!/bin/sh
# mpirun's rsh agent in the tests (--mca plm_rsh_agent): "netns_rsh.sh HOST WORDS..." runs
# WORDS with sh, as ssh would, inside HOST's network namespace named in FAKE_SSH_NETNS
# ("host1=ns1 host2=ns2"), so mpirun's daemons and ranks start on separate "hosts".
host=$1
shift
for pair in ${FAKE_SSH_NETNS:-}; do
  if [ "${pair%%=*}" = "$host" ]; then exec ip netns exec "${pair#*=}" sh -c "$*"; fi
done
echo "netns_rsh.sh: no namespace for host $host" >&2
exit 255
