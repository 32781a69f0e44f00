"""A job queue application against ferrite: RQ 1.11 (lists, blocking pops,
hashes, sorted-set registries) runs jobs in a real worker process, a
worker killed mid-job leaves its job to be failed as RQ's own cleanup
does, and redis-py's Lock (Lua scripts through EVALSHA) excludes its
holders. RQ 1.12 and later keep results in a stream, a type ferrite does
not serve. Usage: rq_jobs.py PORT WORKDIR. Exits non-zero on any mismatch."""
import os
import signal
import subprocess
import sys
import time

import redis
from rq import Queue, Worker
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, StartedJobRegistry

port, work = int(sys.argv[1]), sys.argv[2]
sys.path.insert(0, work)
with open(os.path.join(work, "jobs.py"), "w") as f:
    f.write(
        "import time\n"
        "def add(a, b):\n    return a + b\n"
        "def slow(seconds):\n    time.sleep(seconds)\n    return 'done'\n"
    )
import jobs  # noqa: E402

r = redis.Redis(port=port)
q = Queue("default", connection=r)

# 1. Jobs enqueued, run by a worker process, results read back.
queued = [q.enqueue(jobs.add, i, i) for i in range(20)]
env = dict(os.environ, PYTHONPATH=work)
rq_bin = os.path.join(os.path.dirname(sys.executable), "rq")
done = subprocess.run(
    [rq_bin, "worker", "--burst", "--url", f"redis://127.0.0.1:{port}", "default"],
    env=env, capture_output=True, text=True, timeout=120,
)
assert done.returncode == 0, done.stdout + done.stderr
for i, job in enumerate(queued):
    job = Job.fetch(job.id, connection=r)
    assert job.get_status() == JobStatus.FINISHED, (i, job.get_status())
    assert job.result == 2 * i, (i, job.result)
assert len(q) == 0

# 2. A worker killed mid-job: the job stays in the started registry until
# RQ's cleanup finds its worker gone, then it is failed (abandoned).
slow = q.enqueue(jobs.slow, 30)
worker = subprocess.Popen(
    [rq_bin, "worker", "--url", f"redis://127.0.0.1:{port}", "default"],
    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
started = StartedJobRegistry("default", connection=r)
deadline = time.time() + 60
while slow.id not in started.get_job_ids():
    assert time.time() < deadline, "the worker never started the job"
    time.sleep(0.1)
worker.send_signal(signal.SIGKILL)
worker.wait()
assert Job.fetch(slow.id, connection=r).get_status() == JobStatus.STARTED
started.cleanup(timestamp=time.time() + 10_000)
failed = FailedJobRegistry("default", connection=r)
assert slow.id in failed.get_job_ids(), failed.get_job_ids()
assert Job.fetch(slow.id, connection=r).get_status() == JobStatus.FAILED

# 3. redis-py's Lock: acquire, extend and release are Lua scripts.
lock = r.lock("resource", timeout=10)
other = r.lock("resource", timeout=10)
assert lock.acquire(blocking=False)
assert not other.acquire(blocking=False)
assert lock.extend(5)
lock.release()
assert other.acquire(blocking=False)
other.release()
print("ok")
