#!/usr/bin/env bash
# Formats the project's C++ sources with clang-format and the repository's .clang-format.
# Usage: scripts/format.sh           rewrite every tracked C++ file in place
#        scripts/format.sh --check   change nothing; list the files that are not formatted (exit 1)
# Uses Debian 12's clang-format 14 (scripts/setup.sh installs it): other versions format some
# constructs differently, so the check insists on that one.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=$(command -v clang-format-14 || true)
if [ -z "$tool" ]; then
  echo "format: clang-format-14 not found (scripts/setup.sh --deps-only installs it)" >&2
  exit 69
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' 2>/dev/null ||
                     find src include tests bench python -name '*.[ch]pp' -o -name '*.h' -o -name '*.cc')
if [ "${1:-}" = "--check" ]; then
  # One run over every file; each unformatted spot is reported as "FILE:LINE:COL: error: ...".
  mapfile -t unformatted < <("$tool" --style=file --dry-run -Werror "${files[@]}" 2>&1 |
                            sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*clang-format.*/\1/p' | sort -u)
  if ((${#unformatted[@]})); then
    echo "format: ${#unformatted[@]} of ${#files[@]} files are not formatted (run scripts/format.sh):" >&2
    printf '  %s\n' "${unformatted[@]}" >&2
    exit 1
  fi
  echo "format: all ${#files[@]} C++ files are formatted"
else
  "$tool" --style=file -i "${files[@]}"
  echo "format: formatted ${#files[@]} C++ files"
fi
