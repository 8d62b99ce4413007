"""An sbatch script that serves a rendered repository on a Slurm allocation.

Layout: ``--nodes N --ntasks-per-node G`` (one task per GPU, ``--gpus-per-node G``); one ``srun`` step with
``--multi-prog`` gives every task its own tritonserver command line (Slurm's standard MPMD mechanism): rank 0
serves the whole repository and the endpoints, ranks > 0 load only the TensorRT-LLM model(s) with their
endpoints off (:func:`repo_builder.server.command.rank_argv`, the launcher's layout), each with its own
Python-backend ``shm-region-prefix-name`` ``rb<jobid>_r<rank>_``. MPI wiring is Slurm's: ``srun --mpi=pmix``
(Open MPI in the ranks picks up PMIx from the step). Task 0 runs on the first node of the allocation (block
distribution), so the script polls ``http://<first node>:<http port>/v2/health/ready`` until the server is
ready, then waits for the step.

Stopping: ``--signal=B:TERM@120`` (longer when ``--exit-timeout`` + ``--unload-timeout`` need it) makes Slurm
send SIGTERM to the batch shell alone before the time limit (``scancel --batch --signal=TERM JOB`` does the
same on demand). The script's trap then sends SIGTERM to the step's processes with ``scancel --signal=TERM
JOB.0`` (tritonserver unloads every model and exits; the Python stubs only note the signal), waits for
``srun``, and removes the job's ``/dev/shm`` regions on its node.
Not ``kill srun``: srun answers SIGTERM by killing the step ("forcing job termination", measured with
Slurm 22.05), and a plain ``scancel JOB`` does that too, so it is a kill, not a graceful stop.

An llmapi repository (``--profile llmapi-1.2``) runs ``trtllm-llmapi-launch <rank 0's tritonserver command>`` on
every task, as TensorRT-LLM's backend docs launch it under srun (``docs/llmapi.md``): the wrapper runs
tritonserver on rank 0 and makes the other tasks workers of its LLM (:data:`repo_builder.server.command.LLMAPI_LAUNCH`).

Slurm facts (flags, ``--multi-prog`` file format ``<task ids> <program> <args>``, signal forwarding by srun):
the sbatch(1)/srun(1) manual pages of Slurm 22.05.
"""

from __future__ import annotations

import re
import shlex

from ..server.binary import OPT_TRITONSERVER, TritonBinary
from ..server.command import llmapi_launch_argvs, rank_argv
from ..server.options import PORT_MAX, PORT_MIN, server_exit_timeout
from .facts import DeployError, DeploymentFacts, check_name, check_stop_timeouts
from .options import SlurmOptions  # noqa: F401  (re-exported: moved from this module)

_JOBID = "@SLURM_JOB_ID@"


#: seconds before the time limit that Slurm signals the batch shell: tritonserver's stop timer plus
#: STOP_GRACE_S (the script's clean-up), and at least MIN_SIGNAL_LEAD_S
MIN_SIGNAL_LEAD_S = 120
STOP_GRACE_S = 30


def signal_lead_s(opts: SlurmOptions) -> int:
    """Seconds before the time limit of ``#SBATCH --signal=B:TERM@<this>``."""
    return max(MIN_SIGNAL_LEAD_S, server_exit_timeout(opts.exit_timeout, opts.unload_timeout) + STOP_GRACE_S)


def _heredoc_word(arg: str) -> str:
    """``arg`` for an unquoted heredoc line of a ``--multi-prog`` file (only ``@SLURM_JOB_ID@`` expands)."""
    if re.search(r"\s|['\"]", arg):
        raise DeployError(
            f"argument {arg!r} holds whitespace or quotes, which a Slurm --multi-prog line cannot carry",
            hint="render and serve the repository at a path without spaces",
        )
    escaped = arg.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")
    return escaped.replace(_JOBID, "${SLURM_JOB_ID}")


# Over 80 lines on purpose: it writes one sbatch script top to bottom (checks, ports, rank lines, #SBATCH, srun);
# the text reads in the order of the file it makes.
def script(facts: DeploymentFacts, opts: SlurmOptions) -> str:
    """The sbatch script text.

    Raises:
        DeployError: nodes x GPUs != world size, an invalid job name or port, or a path that a
            ``--multi-prog`` line cannot hold.
    """
    check_name(opts.name, key="--name", max_len=63)
    check_stop_timeouts(opts.exit_timeout, opts.unload_timeout)
    gpus = facts.rank_layout(opts.nodes, opts.gpus_per_node)
    if not re.fullmatch(r"[a-z0-9_]+", opts.mpi):
        raise DeployError(
            f"--mpi {opts.mpi!r} is not a Slurm MPI plugin name",
            key="--mpi",
            hint="pmix, pmi2 or none (srun --mpi=list)",
        )
    ports = {
        "--http-port": opts.http_port or facts.http_port,
        "--grpc-port": opts.grpc_port or facts.grpc_port,
        "--metrics-port": opts.metrics_port or facts.metrics_port,
    }
    for flag, port in ports.items():
        if not PORT_MIN <= port <= PORT_MAX:
            raise DeployError(f"{flag} {port} is not a port number", key=flag)
    if len(set(ports.values())) != len(ports):
        raise DeployError(f"two endpoints share a port: {ports}", key="--http-port")
    http, grpc, metrics = ports.values()
    binary = opts.binary or TritonBinary(path=OPT_TRITONSERVER, source="/opt/tritonserver")
    world = facts.world_size
    argvs = [
        rank_argv(
            binary=binary.path,
            backend_args=binary.server_args(),
            model_repo=facts.serve_path,
            rank=r,
            launch_id="rb" + _JOBID,
            http_address="0.0.0.0",
            http_port=http,
            grpc_port=grpc,
            metrics_port=metrics,
            trtllm_models=list(facts.tensorrt_llm_models),
            exit_timeout=server_exit_timeout(opts.exit_timeout, opts.unload_timeout),
            histogram_latencies=opts.histogram_latencies,
        )
        for r in range(world)
    ]
    if facts.llmapi:  # every task: trtllm-llmapi-launch <rank 0's command> (the wrapper makes ranks > 0 workers)
        argvs = llmapi_launch_argvs(argvs[0], world)
    lines = [f"{r} " + " ".join(_heredoc_word(a) for a in argv) for r, argv in enumerate(argvs)]
    tasks = world if facts.orchestrator is not None else gpus  # orchestrator mode: rank 0 runs no engine rank
    tp = f" (tp {facts.tp_size} x pp {facts.pp_size})" if facts.tp_size and facts.pp_size else ""
    sbatch = [
        f"--job-name={opts.name}",
        f"--nodes={opts.nodes}",
        f"--ntasks-per-node={tasks}",
        f"--output={opts.name}-%j.out",
        f"--signal=B:TERM@{signal_lead_s(opts)}",
    ]
    if opts.gres:
        sbatch.append(f"--gpus-per-node={gpus}")
    for flag, value in (("partition", opts.partition), ("time", opts.time), ("account", opts.account)):
        if value:
            sbatch.append(f"--{flag}={value}")
    srun = [
        "srun",
        f"--nodes={opts.nodes}",
        f"--ntasks={world}",
        f"--ntasks-per-node={tasks}",
        f"--mpi={opts.mpi}",
        "--kill-on-bad-exit=1",
    ]
    if opts.container_image:
        srun += [
            f"--container-image={opts.container_image}",
            f"--container-mounts={facts.serve_path}:{facts.serve_path}",
        ]
    srun += ["--multi-prog", '"$CONF"']
    env = dict(binary.env)
    orchestrator_lines: list[str] = []
    if facts.orchestrator is not None:  # NVIDIA's --multi-model --disable-spawn-processes (server/orchestrator.py)
        from ..server.orchestrator import ORCHESTRATOR_ENV

        env.update(ORCHESTRATOR_ENV)
        orchestrator_lines = [f"# {line}" for line in facts.orchestrator.lines()]
    env_lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    layout = (
        f"every task runs trtllm-llmapi-launch: rank 0 serves {facts.serve_path}, ranks > 0 are workers of its LLM."
        if facts.llmapi
        else f"rank 0 serves {facts.serve_path}, ranks > 0 load {','.join(facts.tensorrt_llm_models)} only."
    )
    text = [
        "#!/bin/bash",
        f"# Generated by repo-builder from {facts.lock_path}: world size {world}{tp},",
        f"# {opts.nodes} node(s) x {tasks} rank(s); {layout}",
        *orchestrator_lines,
        *[f"#SBATCH {flag}" for flag in sbatch],
        "set -euo pipefail",
        "",
        f"HTTP_PORT={http}",
        f"GRPC_PORT={grpc}",
        f"METRICS_PORT={metrics}",
        f"READY_TIMEOUT={int(opts.ready_timeout)}",
        'SHM_PREFIX="rb${SLURM_JOB_ID}_"',
        'CONF="${TMPDIR:-/tmp}/repo-builder-${SLURM_JOB_ID}.multi-prog"',
        'HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
        *env_lines,
        "",
        "# one line per rank: <task id> <program> <args> (srun --multi-prog)",
        'cat > "$CONF" <<EOF',
        *lines,
        "EOF",
        "",
        "SRUN_PID=",
        "cleanup() {",
        "  trap - TERM INT EXIT",
        '  if [ -n "$SRUN_PID" ] && kill -0 "$SRUN_PID" 2>/dev/null; then',
        '    echo "repo-builder: stopping tritonserver (SIGTERM to step ${SLURM_JOB_ID}.0)"',
        '    scancel --signal=TERM "${SLURM_JOB_ID}.0" 2>/dev/null || true',
        '    wait "$SRUN_PID" 2>/dev/null || true',
        "  fi",
        '  rm -f "$CONF" /dev/shm/"$SHM_PREFIX"* 2>/dev/null || true',
        "}",
        "trap cleanup EXIT",
        "trap 'exit 143' TERM",
        "trap 'exit 130' INT",
        "",
        " ".join(srun) + " &",
        "SRUN_PID=$!",
        "",
        "deadline=$((SECONDS + READY_TIMEOUT))",
        'until curl -sf -o /dev/null "http://$HEAD_NODE:$HTTP_PORT/v2/health/ready"; do',
        '  if ! kill -0 "$SRUN_PID" 2>/dev/null; then',
        '    echo "repo-builder: tritonserver exited before it was ready" >&2',
        '    wait "$SRUN_PID"; exit 1',
        "  fi",
        '  if [ "$SECONDS" -ge "$deadline" ]; then',
        '    echo "repo-builder: not ready after ${READY_TIMEOUT} s" >&2; exit 1',
        "  fi",
        "  sleep 1",
        "done",
        'echo "repo-builder: ready: HTTP http://$HEAD_NODE:$HTTP_PORT gRPC $HEAD_NODE:$GRPC_PORT '
        'metrics http://$HEAD_NODE:$METRICS_PORT/metrics"',
        "set +e",
        'wait "$SRUN_PID"',
        "code=$?",
        "SRUN_PID=",
        'echo "repo-builder: tritonserver exited with code $code"',
        "exit $code",
    ]
    return "\n".join(text) + "\n"
