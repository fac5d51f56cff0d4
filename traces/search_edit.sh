#!/bin/sh
# Driver for search_edit.trace: a search/edit-heavy session of shell calls (git, grep, sed,
# find) on a copy of this repository, as an agent hunting for a name and renaming it. Sleeps
# on the host stand in for the model's thinking between calls.
c="$(dirname "$0")/call.sh"
g='git -c user.name=replay -c user.email=replay@invalid -c safe.directory=*'
$c search sh -c "$g log --oneline | head -20"
sleep 2
$c search sh -c "$g grep -n 'human_bytes' | head -40"
sleep 2
$c search grep -rn --include=*.h "Result<" .
sleep 3
$c search sh -c "find . -name '*.cc' | xargs wc -l | sort -n | tail -15"
sleep 2
$c search sed -n '1,60p' core/units.h
sleep 3
$c edit sed -i 's/human_bytes/readable_bytes/g' core/units.h core/units.cc
sleep 1
$c search sh -c "grep -rln 'human_bytes' . | grep -v '^./.git/' | wc -l"
sleep 2
$c edit sh -c "grep -rl 'human_bytes' --include=*.cc --include=*.h . | xargs sed -i 's/human_bytes/readable_bytes/g'"
sleep 2
$c search sh -c "$g diff --stat | tail -5"
sleep 2
$c search sh -c "$g status --short | head -30"
sleep 2
$c edit sh -c "$g commit -qam 'rename human_bytes' && $g log --oneline -1"
sleep 1
$c search sh -c "$g show --stat HEAD | head -20"
