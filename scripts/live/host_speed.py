"""How steady is this machine's speed? Times a fixed piece of work (a 2048² float32
matrix product on one thread) every 0.2 s for SECONDS and prints the median per
window of ten, and the spread. The live check runs it first: an engine's step
times cannot be steadier than the host they run on, so when this spread is tens
of per cent, so is the run-to-run noise of every live measurement.

    python host_speed.py [SECONDS]

Writes nothing: it prints to stdout (check_live.sh appends that to the summary.txt of its run
folder, outside the repository). CPU: needs nothing beyond x86-64 / aarch64; it prints the CPU's
vector flags (AVX2 / AVX-512 / AMX) first, so every run's summary says what the host had.
"""
import os
import statistics
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import numpy as np  # noqa: E402

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
try:
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith(("flags", "Features"))), [])
    wanted = ["avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16"]
    print(f"host cpu: {os.cpu_count()} cores; present: {' '.join(w for w in wanted if w in flags) or 'none of ' + '/'.join(wanted)}")
except OSError:
    print("host cpu: /proc/cpuinfo not readable")
a = np.random.default_rng(0).random((2048, 2048), dtype=np.float32)
times = []
end = time.time() + seconds
while time.time() < end:
    t = time.perf_counter()
    a @ a
    times.append(1000 * (time.perf_counter() - t))
    time.sleep(0.2)
windows = [statistics.median(times[i : i + 10]) for i in range(0, len(times) - 9, 10)]
print("host speed: a fixed matmul, median ms per window of 10:", " ".join(f"{w:.0f}" for w in windows))
if windows:
    lo, hi = min(windows), max(windows)
    print(f"host speed: slowest window {100 * (hi / lo - 1):.0f}% slower than the fastest ({len(times)} samples)")
