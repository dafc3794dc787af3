# What slurm/local-cluster.sh and slurm/virtual-cluster.sh share (sourced by both): the settings
# of a test cluster's slurm.conf and the memory a node may advertise. Expects die() from the caller.

# RealMemory may not exceed what slurmd measures, or the node becomes INVALID; keep a margin, and
# share it among $1 nodes (default 1) that run on this one machine.
slurm_real_memory_mb() {
  local m
  m="$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')"
  [ -n "$m" ] || die "cannot read RealMemory from 'slurmd -C'"
  echo $(( m * 9 / 10 / ${1:-1} ))
}

# The slurm.conf lines both clusters have: slurmctld on port $1 (slurmd on $1 + 1), job records
# under the scratch folder $2. Daemons as root, no authentication: a test cluster, not production.
slurm_common_conf() {
  cat <<EOF
SlurmctldPort=$1
SlurmdPort=$(($1 + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# A requeued job waits for the old credential to expire before it runs again (120 s by default).
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$2/log/jobcomp.txt
JobAcctGatherType=jobacct_gather/none
# Finished jobs stay visible to 'scontrol show job' for an hour.
MinJobAge=3600
MailProg=/bin/true
ReturnToService=2
SchedulerParameters=sched_interval=1
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
EOF
}
