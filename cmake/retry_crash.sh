#!/bin/sh
# Runs a compiler command again when it dies of a signal (exit 128+): Debian's clang-14 has
# been seen to segfault in its lexer on a BPF source at random and pass on the next try.
# A real compile error (exit 1) is not retried.
for try in 1 2 3; do
  "$@"
  rc=$?
  [ "$rc" -lt 128 ] && exit "$rc"
  echo "retry_crash.sh: '$1' died with exit $rc (try $try of 3)" >&2
done
exit "$rc"
