#!/bin/bash
# runws.sh PCAP [extra tshark opts]: runs the dissector with -O splitrpc, then the expert fields; reports rc, seconds, max RSS, Lua errors.
LUA=/work/main/tools/wireshark/splitrpc.lua
f=$1; shift
out=/tmp/ws70/out.$(basename $f).txt
/usr/bin/time -f "%e s %M KB" -o /tmp/ws70/time.txt timeout 300 tshark -2 -r "$f" -X lua_script:$LUA "$@" -O splitrpc >$out 2>/tmp/ws70/err.txt; rc=$?
t=$(cat /tmp/ws70/time.txt | tail -1)
timeout 300 tshark -2 -r "$f" -X lua_script:$LUA "$@" -T fields -e frame.number -e _ws.expert.message -e _ws.col.Info >$out.exp 2>>/tmp/ws70/err.txt; rc2=$?
le=$(cat $out $out.exp /tmp/ws70/err.txt | grep -ci "lua error")
echo "$(basename $f) $* rc=$rc/$rc2 time=[$t] luaerr=$le frames=$(wc -l <$out.exp) stderr=$(head -c 300 /tmp/ws70/err.txt | tr '\n' ' ')"
