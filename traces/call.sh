#!/bin/sh
# One tool call through the run `sandgate record` serves: call.sh INTENT CMD...
# (SANDGATE_BIN and SANDGATE_SOCKET are set by `sandgate record`.)
intent=$1; shift
exec "$SANDGATE_BIN" exec --socket "$SANDGATE_SOCKET" --intent "$intent" -- "$@"
