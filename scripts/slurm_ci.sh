#!/usr/bin/env bash
# A real one-node Slurm for the Slurm tests (make test-slurm) and CI: munge, a local MariaDB, the
# accounting daemon slurmdbd (so sacct and submitit's job states work as on a real cluster),
# slurmctld and slurmd with four pretend GPUs (GRES on character device files, so Slurm hands out
# CUDA_VISIBLE_DEVICES) and proctrack/cgroup (a cancelled job takes its whole process tree with it).
#
#   scripts/slurm_ci.sh start     install the packages if missing (apt), start everything, wait idle
#   scripts/slurm_ci.sh stop      stop every daemon it started (by pid), leave the logs
#   scripts/slurm_ci.sh status    which daemons run, sinfo, sacctmgr's cluster
#   scripts/slurm_ci.sh env       the line to eval so that sbatch/squeue/sacct find this Slurm
#
# Everything lives under one scratch folder, SLURM_CI_DIR (default /tmp/doccount-slurm), wiped on
# start (Slurm restarts job ids at 1, and the database must not keep jobs of an earlier start).
# Needs root (the daemons run as root, as in CI) and no systemd. Measured on Debian 12 with
# slurm-wlm 22.05 and MariaDB 10.11; see docs/serving.md, "On a Slurm cluster".
set -euo pipefail

BASE="${SLURM_CI_DIR:-/tmp/doccount-slurm}"
DB_PORT="${SLURM_CI_DB_PORT:-33061}"
NODE="$(hostname -s)"
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server mariadb-client)
export SLURM_CONF="$BASE/etc/slurm.conf"

log() { printf '[slurm-ci %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  [ "$(id -u)" -eq 0 ] || die "packages missing (${missing[*]}): run as root or install them with apt"
  # policy-rc.d keeps the packages' init scripts from starting their own daemons (no systemd here).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -qq -o DPkg::Lock::Timeout=600 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null; }
}

now_us() { echo "${EPOCHREALTIME/./}"; }
secs_since() {  # secs_since START_US [END_US]: seconds with one decimal
  local d=$(( ${2:-$(now_us)} - $1 ))
  printf '%d.%d' $(( d / 1000000 )) $(( d % 1000000 / 100000 ))
}

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what did not come up within ${limit}s (logs: $BASE/log)"
    sleep 0.2
  done
}

write_configs() {
  mkdir -p "$BASE"/{etc,state,spool/slurmd,run,log,dev,munge,db}
  chmod 755 "$BASE" "$BASE/munge"
  for i in 0 1 2 3; do mknod "$BASE/dev/fakegpu$i" c 1 3; done
  cat > "$BASE/etc/slurm.conf" <<EOF
ClusterName=ci
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$BASE/munge/munge.socket.2
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool/slurmd
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/cgroup
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MinJobAge=3600
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
# The munge socket for the slurmdbd connection (Slurm reads it from here, not from AuthInfo).
AccountingStoragePass=$BASE/munge/munge.socket.2
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=8 RealMemory=8000 Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  echo "Name=gpu File=$BASE/dev/fakegpu[0-3]" > "$BASE/etc/gres.conf"
  printf '%s\n' CgroupPlugin=cgroup/v1 ConstrainDevices=no ConstrainCores=no ConstrainRAMSpace=no \
    > "$BASE/etc/cgroup.conf"
  # slurmdbd.conf holds the database password: slurmdbd refuses it unless it is 600 and the SlurmUser's.
  DB_PASS="$(head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
  (umask 077 && cat > "$BASE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$BASE/munge/munge.socket.2
DbdHost=localhost
SlurmUser=root
PidFile=$BASE/run/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  )
}

start_munge() {
  (umask 077 && head -c 128 /dev/urandom > "$BASE/munge/munge.key")
  munged --key-file="$BASE/munge/munge.key" --socket="$BASE/munge/munge.socket.2" \
    --pid-file="$BASE/run/munged.pid" --log-file="$BASE/log/munged.log" --seed-file="$BASE/munge/seed"
  wait_for 10 munged test -S "$BASE/munge/munge.socket.2"
}

db() { mariadb --no-defaults --socket="$BASE/db/mysqld.sock" -uroot "$@"; }

start_mariadb() {
  mariadb-install-db --no-defaults --user=root --datadir="$BASE/db/data" --skip-test-db \
    --auth-root-authentication-method=socket > "$BASE/log/mariadb-install.log" 2>&1
  # mariadbd does not daemonise: run it in its own session, in the background, stopped by pid file.
  setsid mariadbd --no-defaults --user=root --datadir="$BASE/db/data" --socket="$BASE/db/mysqld.sock" \
    --pid-file="$BASE/run/mariadbd.pid" --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
    --log-error="$BASE/log/mariadb.log" --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
    --innodb-lock-wait-timeout=900 < /dev/null > /dev/null 2>&1 &
  wait_for 60 mariadbd db -e 'SELECT 1'
  db -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
         GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurm() {
  slurmdbd
  wait_for 60 slurmdbd sacctmgr -n list cluster
  sacctmgr -i -Q add cluster ci >/dev/null
  slurmctld
  wait_for 60 slurmctld scontrol ping
  slurmd
  wait_for 60 'the node (idle)' bash -c '[ "$(sinfo -h -N -o %T)" = idle ]'
  # sacct answers from the database: wait until slurmctld has registered there.
  wait_for 60 'slurmctld in the accounting database' bash -c \
    'sacctmgr -n -P list cluster format=cluster,controlhost | grep -q "^ci|."'
}

daemons_running() {
  local any=1
  for d in munged mariadbd slurmdbd slurmctld slurmd; do pid_alive "$BASE/run/$d.pid" && any=0; done
  return $any
}

cmd_start() {
  local t0 t1
  t0=$(now_us)
  install_packages
  t1=$(now_us)
  daemons_running && { log "already running under $BASE (stop it first)"; return 0; }
  rm -rf "$BASE"
  write_configs
  start_munge
  start_mariadb
  start_slurm
  printf 'slurm-ci: up under %s (install %s s, start %s s); %s\n' "$BASE" \
    "$(secs_since "$t0" "$t1")" "$(secs_since "$t1")" "$(cmd_env)" >&2
}

stop_pid() {  # stop_pid NAME: SIGTERM, wait up to 30 s, then SIGKILL
  local f="$BASE/run/$1.pid" pid
  pid_alive "$f" || return 0
  pid="$(cat "$f")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  log "$1 ($pid) ignored SIGTERM for 30 s: SIGKILL"
  kill -9 "$pid" 2>/dev/null || true
}

cmd_stop() {
  local t0; t0=$(now_us)
  # Jobs first, so their processes are gone before slurmd is (cgroup proctrack kills the tree).
  if pid_alive "$BASE/run/slurmctld.pid"; then scancel --user=root 2>/dev/null || true; fi
  for d in slurmd slurmctld slurmdbd mariadbd munged; do stop_pid "$d"; done
  printf 'slurm-ci: stopped (%s s); logs kept in %s/log\n' "$(secs_since "$t0")" "$BASE" >&2
}

cmd_status() {
  local rc=0
  for d in munged mariadbd slurmdbd slurmctld slurmd; do
    if pid_alive "$BASE/run/$d.pid"; then echo "$d: running (pid $(cat "$BASE/run/$d.pid"))"
    else echo "$d: not running"; rc=1; fi
  done
  [ $rc -eq 0 ] || return $rc
  sinfo -N -o '%N %T %G'
  sacctmgr -n -P list cluster format=cluster,controlhost
}

cmd_env() { printf 'export SLURM_CONF=%q' "$SLURM_CONF"; }

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env; echo ;;
  *) echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
