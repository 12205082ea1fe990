"""trainyard.Client: the coordinator's JobService from Python — what a
notebook or a pipeline uses, as trainctl does from a shell.

    from trainyard import Client
    c = Client("127.0.0.1:50051", token=open("token").read().strip())
    job = c.submit({"name": "mlp", "model": {"kind": "mlp", "hidden": [64]}, "max_steps": 100})
    for update in c.watch(job["id"]):
        print(update)
    c.history(job["id"], dataframe=True)      # loss, samples/s... as a pandas DataFrame

Jobs, checkpoints and the rest come back as plain dicts and lists (the
proto messages' fields, int64 fields as ints, enum values as their names).
A call the server refuses raises a TrainyardError of the gRPC code's class:
NotFound, PermissionDenied, InvalidArgument, Unauthenticated,
FailedPrecondition, ResourceExhausted, Unavailable, DeadlineExceeded.

Several coordinators (high availability: one leads, the others stand by):
`Client("a:50051,b:50051")` or TRAINYARD_SERVER=a:50051,b:50051. Each call
goes to the leader: the one that last answered as such first, then the
list in order; a standby's answer (UNAVAILABLE naming the leader in the
trailing metadata `trainyard-leader`) sends it there, an address that does
not connect to the next. submit, submit_sweep, resume and checkpoint go on
to another coordinator only after a standby's answer or a connection that
never opened. `watch` opens its stream again at the new leader after a
takeover (the job's state comes again first).

Needs grpcio and protobuf. Installed with `pip install ./python`, the
messages are generated into the package when it is built; in the source
tree, the build generates them beside the binaries (build/python/).
"""
import collections
import json
import os
import time

__all__ = ["Client", "TrainyardError", "NotFound", "PermissionDenied", "InvalidArgument", "Unauthenticated",
           "FailedPrecondition", "ResourceExhausted", "Unavailable", "DeadlineExceeded", "AlreadyExists",
           "Cancelled", "Internal"]

_STATES = ["JOB_STATE_UNSPECIFIED", "QUEUED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
           "RECOVERING"]
TERMINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELLED")


class TrainyardError(Exception):
    """A call the server refused: `code` is the gRPC status code's name
    (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION...), `message` why.
    Raised as the subclass of its code where there is one."""

    code = "UNKNOWN"

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class NotFound(TrainyardError):
    """No such job — or one the caller may not see."""


class PermissionDenied(TrainyardError):
    pass


class InvalidArgument(TrainyardError):
    """The request (a spec, a field) is not valid; the message names what."""


class Unauthenticated(TrainyardError):
    pass


class FailedPrecondition(TrainyardError):
    """Not now: the job is not in a state that allows it."""


class ResourceExhausted(TrainyardError):
    """Over a quota."""


class Unavailable(TrainyardError):
    """The server cannot be reached, or is stopping."""


class DeadlineExceeded(TrainyardError):
    pass


class AlreadyExists(TrainyardError):
    pass


class Cancelled(TrainyardError):
    pass


class Internal(TrainyardError):
    pass


_ERRORS = {cls.__name__: cls for cls in (NotFound, PermissionDenied, InvalidArgument, Unauthenticated,
                                         FailedPrecondition, ResourceExhausted, Unavailable, DeadlineExceeded,
                                         AlreadyExists, Cancelled, Internal)}


def _error(code, message):
    name = "".join(part.capitalize() for part in code.split("_"))
    return _ERRORS.get(name, TrainyardError)(code, message)


_LEADER_KEY = "trainyard-leader"  # common/leader_hint.h
_STANDBY_PREFIX = "this coordinator is a standby; "
_TAKEOVER_WINDOW_S = 60.0  # how long a watch looks for a new leader


def split_addresses(text):
    """"a:50051, b:50051" -> ["a:50051", "b:50051"]: split at commas, each
    trimmed; an empty item is a ValueError naming it (as trainctl's)."""
    out = []
    for i, item in enumerate(text.split(","), 1):
        item = item.strip()
        if not item:
            raise ValueError(f'coordinator address list "{text}": item {i} is empty (write the addresses as '
                             f'HOST:PORT,HOST:PORT, without empty items)')
        if any(c.isspace() for c in item):
            raise ValueError(f'coordinator address list "{text}": item {i} ("{item}") has a space inside; '
                             f'separate addresses with commas')
        if item not in out:
            out.append(item)
    return out


def _modules():
    try:
        import grpc
        from trainyard.v1 import trainyard_pb2, trainyard_pb2_grpc
    except ImportError as e:
        raise ImportError(
            f"trainyard.Client needs grpcio, protobuf and the generated messages (trainyard/v1: made when the "
            f"package is built, `pip install ./python`, or by the CMake build in build/python): {e}") from e
    return grpc, trainyard_pb2, trainyard_pb2_grpc


# int64 fields travel in JSON as strings; a dict from the client has ints
# (found from the messages' own descriptors).
_INT64_TYPES = (3, 4, 6, 16, 18)  # FieldDescriptor.TYPE_INT64, UINT64, FIXED64, SFIXED64, SINT64


def _ints(message, d):
    for f in message.DESCRIPTOR.fields:
        if f.name not in d:
            continue
        # protobuf 6+: is_repeated; before: label (3, LABEL_REPEATED).
        repeated = f.is_repeated if hasattr(f, "is_repeated") else f.label == 3
        if f.message_type is not None and not f.message_type.GetOptions().map_entry:
            values = getattr(message, f.name)
            if repeated:
                d[f.name] = [_ints(m, x) for m, x in zip(values, d[f.name])]
            else:
                _ints(values, d[f.name])
        elif f.type in _INT64_TYPES:
            d[f.name] = [int(x) for x in d[f.name]] if repeated else int(d[f.name])
    return d


def _to_dict(message):
    from google.protobuf.json_format import MessageToDict
    try:  # protobuf 4
        d = MessageToDict(message, preserving_proto_field_name=True, including_default_value_fields=True)
    except TypeError:  # protobuf 5 renamed it
        d = MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return _ints(message, d)


def _sweep_dict(message):
    """A sweep as `trainctl sweep get -o json` shows it: each trial's values
    by parameter ({"optimizer.lr": "0.01"})."""
    d = _to_dict(message)
    for t in d.get("trials", []):
        t["values"] = dict(zip(d.get("parameters", []), t.get("values", [])))
    return d


class Client:
    """A connection to a trainyard-server. `server` is HOST:PORT, or several
    comma-separated of which one leads (default: $TRAINYARD_SERVER, else
    127.0.0.1:50051); `token` the bearer token the
    server wants (default: $TRAINYARD_TOKEN); `ca` a CA certificate (PEM
    bytes or a path) for a TLS server, `cert`/`key` a client certificate
    and key for a mutual-TLS one; `timeout` the deadline of each call in
    seconds."""

    def __init__(self, server=None, token=None, ca=None, cert=None, key=None, timeout=60.0):
        grpc, pb, rpc = _modules()
        self._grpc, self._pb, self._rpc = grpc, pb, rpc
        server = server or os.environ.get("TRAINYARD_SERVER") or "127.0.0.1:50051"
        self._server = server
        self._addresses = split_addresses(server)
        self._leader = self._addresses[0]  # the last to answer as the leader (or named by a standby)
        self._token = token if token is not None else os.environ.get("TRAINYARD_TOKEN")
        if self._token:
            self._token = self._token.strip()
        read = lambda v: v if isinstance(v, bytes) or v is None else open(v, "rb").read()  # noqa: E731
        self._creds = None
        if ca:
            self._creds = grpc.ssl_channel_credentials(root_certificates=read(ca), private_key=read(key),
                                                       certificate_chain=read(cert))
        self._channels = {}  # address -> (channel, stub)
        self._reached = set()  # addresses known to answer
        self._timeout = timeout

    def _at(self, address):
        if address not in self._channels:
            options = [("grpc.max_reconnect_backoff_ms", 1000)]
            channel = (self._grpc.secure_channel(address, self._creds, options) if self._creds else
                       self._grpc.insecure_channel(address, options))
            self._channels[address] = (channel, self._rpc.JobServiceStub(channel))
        return self._channels[address]

    def _reachable(self, address, timeout):
        """Whether the coordinator at `address` answers (a health check, once
        per address until a call to it fails): a refused connection is told at
        once, a host that is gone within `timeout` s."""
        if address in self._reached:
            return True
        grpc = self._grpc
        probe = self._at(address)[0].unary_unary("/grpc.health.v1.Health/Check", request_serializer=bytes,
                                                 response_deserializer=bytes)
        try:
            probe(b"", timeout=timeout)
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED or (
                    e.code() == grpc.StatusCode.UNAVAILABLE and not (e.details() or "").startswith(_STANDBY_PREFIX)):
                return False
        self._reached.add(address)
        return True

    @property
    def _stub(self):
        return self._at(self._leader)[1]

    def close(self):
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _metadata(self):
        return [("authorization", "Bearer " + self._token)] if self._token else None

    def _call(self, method, request, timeout=None, once=False):
        """One call, to the leader (see the module's doc). `once`: not sent on
        after an answer whose outcome is unknown (UNAVAILABLE from a
        coordinator that is not a standby)."""
        grpc = self._grpc
        timeout = timeout or self._timeout
        order = [self._leader] + [a for a in self._addresses if a != self._leader]
        queue, seen, tried, standby_answered, last = collections.deque(order), set(), [], False, None
        while queue:
            address = queue.popleft()
            if address in seen:
                continue
            seen.add(address)
            stub = self._at(address)[1]
            # With several to try, one that does not connect (within 5 s) is passed over.
            if (len(order) > 1 or len(seen) > 1) and not self._reachable(address, min(timeout, 5.0)):
                tried.append(f"{address}: cannot connect")
                last = None
                continue
            try:
                result = getattr(stub, method)(request, timeout=timeout, metadata=self._metadata())
                self._leader = address
                return result
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    self._leader = address
                    raise _error(e.code().name, e.details()) from None
                details = e.details() or ""
                last = details
                tried.append(f"{address}: {details}")
                standby = details.startswith(_STANDBY_PREFIX)
                if not standby:
                    self._reached.discard(address)
                standby_answered = standby_answered or standby
                if once and not standby and "failed to connect to all addresses" not in details:
                    raise _error("UNAVAILABLE", details) from None
                hint = dict(e.trailing_metadata() or ()).get(_LEADER_KEY, "")
                if hint and hint != address:
                    self._leader = hint
                    if hint not in seen:
                        queue.appendleft(hint)
        if len(tried) == 1 and not standby_answered and last is not None:
            raise _error("UNAVAILABLE", last)
        raise Unavailable("UNAVAILABLE", f"no trainyard server of {self._server} answered as the leader: " +
                          "; ".join(tried))

    # ---- jobs -------------------------------------------------------------

    def submit(self, spec, accelerate_config=None, source_name=""):
        """Queues a job. `spec`: a dict (the spec's fields, as in YAML), the
        spec's text (YAML or JSON) or a path to a file of it. Returns the job."""
        if isinstance(spec, dict):
            spec = json.dumps(spec)
        elif os.path.isfile(spec):
            source_name = source_name or spec
            spec = open(spec).read()
        if isinstance(accelerate_config, dict):
            accelerate_config = json.dumps(accelerate_config)
        elif accelerate_config and os.path.isfile(accelerate_config):
            accelerate_config = open(accelerate_config).read()
        r = self._call("SubmitJob", self._pb.SubmitJobRequest(spec=spec, source_name=source_name,
                                                               accelerate_config=accelerate_config or ""),
                       once=True)
        return _to_dict(r.job)

    def get(self, job_id, all_ranks=False):
        """The job with its events (and, while it runs, its ranks' last
        steps, where they run, its replicas). A running job's ranks come
        256 at a time: the first page, or with `all_ranks` every page."""
        req = self._pb.GetJobRequest(id=job_id, rank_page_size=1000 if all_ranks else 0)
        resp = self._call("GetJob", req)
        job = resp.job
        while all_ranks and resp.next_rank_page_token:
            req.rank_page_token = resp.next_rank_page_token
            resp = self._call("GetJob", req)
            job.ranks.extend(resp.job.ranks)
            job.places.extend(resp.job.places)
        return _to_dict(job)

    def list(self, states=None, all_users=False):
        """Every job (in `states`, names like "RUNNING", when given), oldest
        first; `all_users`: everyone's (admins), not only the caller's."""
        unknown = [s for s in (states or []) if s not in _STATES[1:]]
        if unknown:
            raise ValueError(f"unknown state(s) {unknown}; known: {_STATES[1:]}")
        wanted = [_STATES.index(s) for s in (states or [])]
        jobs, token = [], ""
        while True:
            r = self._call("ListJobs", self._pb.ListJobsRequest(states=wanted, page_size=1000, page_token=token,
                                                                 all_users=all_users))
            jobs.extend(_to_dict(j) for j in r.jobs)
            token = r.next_page_token
            if not token:
                return jobs

    def queue(self, all_users=False):
        """The waiting jobs in the order they start, with why each waits
        ("entries"), and what users and groups use against their quotas
        ("usage")."""
        req = self._pb.GetQueueRequest(all_users=all_users)
        resp = self._call("GetQueue", req)
        while resp.next_page_token:  # every page; the first one's usage
            req.page_token = resp.next_page_token
            page = self._call("GetQueue", req)
            resp.entries.extend(page.entries)
            resp.next_page_token = page.next_page_token
        return _to_dict(resp)

    def watch(self, job_id):
        """Yields the job's updates until it ends: {"job": ...} on every state
        change, {"metrics": ...} for the lead rank's steps. With several
        coordinators, a stream lost in a takeover is opened again at the
        leader (within 60 s); the job comes again first."""
        grpc = self._grpc
        lost_since = None
        while True:
            stream = self._stub.WatchJob(self._pb.WatchJobRequest(id=job_id), metadata=self._metadata())
            got_any = False
            try:
                for u in stream:
                    lost_since, got_any = None, True
                    yield _to_dict(u)
                return
            except grpc.RpcError as e:
                details = e.details() or ""
                if e.code() != grpc.StatusCode.UNAVAILABLE or (
                        len(self._addresses) < 2 and not details.startswith(_STANDBY_PREFIX)):
                    raise _error(e.code().name, details) from None
                hint = dict(e.trailing_metadata() or ()).get(_LEADER_KEY, "")
                if hint:
                    self._leader = hint
                lost_since = lost_since or time.monotonic()
                if not got_any:  # refused at once again: paced
                    time.sleep(0.25)
                # Where the leader is: a call through the list, until the window ends.
                while True:
                    try:
                        self._call("GetJob", self._pb.GetJobRequest(id=job_id))
                        break
                    except Unavailable:
                        if time.monotonic() - lost_since > _TAKEOVER_WINDOW_S:
                            raise
                        time.sleep(0.25)

    def wait(self, job_id):
        """Blocks until the job ends; returns it."""
        for _ in self.watch(job_id):
            pass
        return self.get(job_id)

    def cancel(self, job_id, checkpoint=False, wait=True):
        """Cancels the job; with `checkpoint`, a running job saves a checkpoint
        first. Returns the job once it ended ("CANCELLED"), as `trainctl
        cancel` does; with wait=False, as the request left it (its workers
        may still be stopping: "RUNNING")."""
        job = _to_dict(self._call("CancelJob", self._pb.CancelJobRequest(id=job_id, checkpoint=checkpoint)).job)
        return self.wait(job_id) if wait else job

    def scale(self, job_id, num_processes):
        """Grows or shrinks a running elastic job to `num_processes` ranks
        (between its elastic.min_processes and num_processes); returns the
        job at once, while ranks join or leave (see its "replicas")."""
        req = self._pb.ScaleJobRequest(id=job_id, num_processes=num_processes)
        return _to_dict(self._call("ScaleJob", req).job)

    def checkpoint(self, job_id, sharded=False, wait=True, timeout=600.0):
        """Asks a running job for a checkpoint; with `wait`, first waits for a
        job that is still starting to run, then returns the checkpoint once
        saved (or raises when it failed)."""
        kind = self._pb.SHARDED if sharded else self._pb.CHECKPOINT_TYPE_UNSPECIFIED
        r = self._call("CheckpointJob", self._pb.CheckpointJobRequest(id=job_id, type=kind, wait=wait),
                       timeout=timeout if wait else None, once=True)
        return _to_dict(r.checkpoint) if wait else {"request_id": r.request_id}

    def checkpoints(self, job_id):
        return [_to_dict(c) for c in self._call("ListCheckpoints", self._pb.ListCheckpointsRequest(id=job_id))
                .checkpoints]

    def resume(self, job_id, from_checkpoint="", num_processes=0):
        """Starts an ended job again from a checkpoint (default: its latest)."""
        r = self._call("ResumeJob", self._pb.ResumeJobRequest(id=job_id, num_processes=num_processes,
                                                               **{"from": from_checkpoint}), once=True)
        return _to_dict(r.job)

    def logs(self, job_id, rank=0, tail_bytes=0, attempt=0):
        """The end of one rank's log (of `attempt`; 0: the latest), as text."""
        r = self._call("GetLogs", self._pb.GetLogsRequest(id=job_id, rank=rank, tail_bytes=tail_bytes,
                                                           attempt=attempt))
        return r.content.decode("utf-8", errors="replace")

    def diagnose(self, job_id, timeout_ms=5000):
        """Asks a running job's ranks for their flight records: which rank is
        behind, at which collective ("verdict", "behind_ranks", "ranks")."""
        r = self._call("DiagnoseJob", self._pb.DiagnoseJobRequest(id=job_id, timeout_ms=timeout_ms),
                       timeout=timeout_ms / 1000 + self._timeout)
        return _to_dict(r)

    def submit_sweep(self, spec):
        """Starts a hyperparameter sweep: a job spec with a `sweep:` section
        (docs/reference/sweeps.md), as a dict, text or a path. Returns the
        sweep: its id, state, searcher, metric, parameters and trials."""
        if isinstance(spec, dict):
            spec = json.dumps(spec)
        elif os.path.isfile(spec):
            spec = open(spec).read()
        return _sweep_dict(self._call("SubmitSweep", self._pb.SubmitSweepRequest(spec=spec), once=True).sweep)

    def get_sweep(self, sweep_id):
        """The sweep and its trials (each: number, job_id, values by
        parameter name, state, early_stopped, rungs_passed,
        best_metric, step, rank_seconds, reason); best_trial is -1 until a
        trial reported the metric."""
        return _sweep_dict(self._call("GetSweep", self._pb.GetSweepRequest(id=sweep_id)).sweep)

    def list_sweeps(self, all_users=False):
        out, token = [], ""
        while True:  # every page (a listed sweep has no spec: get_sweep has it)
            page = self._call("ListSweeps", self._pb.ListSweepsRequest(all_users=all_users, page_size=1000,
                                                                       page_token=token))
            out += [_sweep_dict(w) for w in page.sweeps]
            token = page.next_page_token
            if not token:
                return out

    def cancel_sweep(self, sweep_id, keep_best=False):
        """Cancels every trial still queued or running (all but the best so
        far with `keep_best`); the sweep starts no more."""
        req = self._pb.CancelSweepRequest(id=sweep_id, keep_best=keep_best)
        return _sweep_dict(self._call("CancelSweep", req).sweep)

    def history(self, job_id, series=None, dataframe=False):
        """The job's series across its attempts (loss, eval_loss,
        samples_per_second, step_seconds, learning_rate, grad_norm,
        memory_bytes, mfu, world_size, and those its script reports under
        names of its own; `series`: these only), each at most
        2,000 points of {"step", "unix_millis", "value"}, with its "events"
        and "checkpoints" on the same time axis. With `dataframe`, a pandas
        DataFrame instead: one row per (series, point), columns series,
        step, time (a pandas Timestamp), value."""
        r = self._call("GetJobHistory", self._pb.GetJobHistoryRequest(id=job_id, series=series or []))
        out = {"series": {s.name: [{"step": p.step, "unix_millis": p.unix_millis, "value": p.value}
                                   for p in s.points] for s in r.series},
               "samples": {s.name: s.samples for s in r.series},
               "events": [_to_dict(e) for e in r.events],
               "checkpoints": [_to_dict(c) for c in r.checkpoints]}
        if not dataframe:
            return out
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("history(dataframe=True) needs pandas: pip install './python[pandas]'") from e
        rows = [(name, p["step"], p["unix_millis"], p["value"]) for name, pts in out["series"].items() for p in pts]
        df = pd.DataFrame(rows, columns=["series", "step", "unix_millis", "value"])
        df["time"] = pd.to_datetime(df["unix_millis"], unit="ms")
        return df[["series", "step", "time", "value"]]
