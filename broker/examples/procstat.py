"""A process's CPU and context switches, summed over its threads, from
/proc: what the idle measurements (idle_aiokafka.py, wake_floor.py) read."""

import os


def cpu_ns(pid):
    """CPU time (user and kernel) of PID's threads, ns, from schedstat."""
    total = 0
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/schedstat" % (pid, task)) as f:
            total += int(f.read().split()[0])
    return total


def switches(pid):
    """Context switches (voluntary and not) of PID's threads."""
    total = 0
    for task in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/status" % (pid, task)) as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total
