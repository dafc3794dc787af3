#!/bin/sh
# Each role's code links nothing of another role's, checked on the built objects (the include rule,
# layout.roles_apart, does not see a call to a function declared in a shared header and defined in
# a role's folder). The objects are sorted by where their source is: src/driver/, src/agent/,
# src/executor/ (its object library), and what all of them share (src/calls/, src/transport/,
# src/common/, src/task_side.cpp; src/runtime.cpp, which becomes each role, is in none). A role's objects must use no symbol another role's objects define, and the shared
# ones none of any role's. Prints each crossing as "<user> uses <definer>'s <symbol>".
#   roles_linked_apart.sh <object file>...   (libfibra's and its object libraries', from CMake)
set -u
pick() { for o in $all; do case "$o" in *$1*) printf '%s\n' "$o" ;; esac; done; }
all="$*"
executor=$(pick /fibra_executor.dir/)
driver=$(pick /src/driver/)
agent=$(pick /src/agent/)
shared="$(pick /fibra_calls.dir/) $(pick /src/transport/) $(pick /src/common/) $(pick /src/task_side.)"
for role in driver agent executor; do
  if [ -z "$(eval echo \$$role)" ]; then echo "FAIL: no objects of src/$role/ among the arguments"; exit 1; fi
done
# (templates, inline functions and the standard library's are defined alike in many objects)
alike='^(std::|boost::|__gnu_cxx::|void std::|typeinfo|vtable|guard variable|construction vtable|VTT)'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for set in driver agent executor shared; do
  objs=$(eval echo \$$set)
  nm -C --defined-only $objs | awk '$2 ~ /^[TDBRVW]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
    grep -Ev "$alike" | sort -u > "$tmp/$set.def"
  nm -C --undefined-only $objs | awk '{ $1 = ""; sub(/^ /, ""); print }' | sort -u > "$tmp/$set.use"
done
crossings() {  # user, then the sets whose symbols it must not use
  user=$1
  shift
  for d in "$@"; do comm -12 "$tmp/$d.def" "$tmp/$user.use" | sed "s/^/$user uses $d's /"; done
}
out=$(crossings driver agent executor; crossings agent driver executor; crossings executor driver agent
      crossings shared driver agent executor)
if [ -n "$out" ]; then
  echo "$out"
  echo "FAIL: a role's code links another's (move what both run to src/calls/, or reach the executor through src/task_side.hpp)"
  exit 1
fi
echo "PASS: driver, agent and executor link nothing of each other; calls, transport and common nothing of any"
