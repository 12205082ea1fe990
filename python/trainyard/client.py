"""trainyard.Client: the coordinator's JobService from Python — what a
notebook or a pipeline uses, as trainctl does from a shell.

    from trainyard import Client
    c = Client("127.0.0.1:50051", token=open("token").read().strip())
    job = c.submit(open("job.yaml").read(), accelerate_config=open("cfg.yaml").read())
    for update in c.watch(job["id"]):
        print(update)
    print(c.logs(job["id"], rank=0))

Jobs and checkpoints come back as dicts (the proto messages' fields, enum
values as their names). Needs grpcio and protobuf (Debian's python3-grpcio);
the message classes are generated from proto/ at build time, into this
package (trainyard/v1/).
"""
import os

_STATES = ["JOB_STATE_UNSPECIFIED", "QUEUED", "STARTING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED",
           "RECOVERING"]


class TrainyardError(Exception):
    """A call the server refused: `code` is the gRPC status code's name
    (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION...), `message` why."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _modules():
    try:
        import grpc
        from trainyard.v1 import trainyard_pb2, trainyard_pb2_grpc
    except ImportError as e:
        raise ImportError(
            f"trainyard.Client needs grpcio, protobuf and the generated messages (trainyard/v1, made by the "
            f"build): {e}") from e
    return grpc, trainyard_pb2, trainyard_pb2_grpc


def _to_dict(message):
    from google.protobuf.json_format import MessageToDict
    try:  # protobuf 4
        return MessageToDict(message, preserving_proto_field_name=True, including_default_value_fields=True)
    except TypeError:  # protobuf 5 renamed it
        return MessageToDict(message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)


class Client:
    """A connection to one trainyard-server. `server` is HOST:PORT; `token`
    the bearer token the server wants (default: $TRAINYARD_TOKEN); `ca` a
    CA certificate (PEM bytes or a path) for a TLS server; `timeout` the
    deadline of each call in seconds."""

    def __init__(self, server=None, token=None, ca=None, timeout=60.0):
        grpc, pb, rpc = _modules()
        self._grpc, self._pb = grpc, pb
        server = server or os.environ.get("TRAINYARD_SERVER", "127.0.0.1:50051")
        self._token = token if token is not None else os.environ.get("TRAINYARD_TOKEN")
        if ca:
            pem = ca if isinstance(ca, bytes) else open(ca, "rb").read()
            self._channel = grpc.secure_channel(server, grpc.ssl_channel_credentials(root_certificates=pem))
        else:
            self._channel = grpc.insecure_channel(server)
        self._stub = rpc.JobServiceStub(self._channel)
        self._timeout = timeout

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout=None):
        metadata = [("authorization", "Bearer " + self._token)] if self._token else None
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self._timeout, metadata=metadata)
        except self._grpc.RpcError as e:
            raise TrainyardError(e.code().name, e.details()) from None

    def submit(self, spec, accelerate_config=None, source_name=""):
        """Queues a job: `spec` is the spec's text (YAML or JSON) or a path to
        it. Returns the job."""
        if os.path.isfile(spec):
            source_name = source_name or spec
            spec = open(spec).read()
        if accelerate_config and os.path.isfile(accelerate_config):
            accelerate_config = open(accelerate_config).read()
        r = self._call("SubmitJob", self._pb.SubmitJobRequest(spec=spec, source_name=source_name,
                                                               accelerate_config=accelerate_config or ""))
        return _to_dict(r.job)

    def get(self, job_id):
        """The job with its events."""
        return _to_dict(self._call("GetJob", self._pb.GetJobRequest(id=job_id)).job)

    def list(self, states=None):
        """Every job (in `states`, names like "RUNNING", when given), oldest first."""
        wanted = [_STATES.index(s) for s in (states or [])]
        jobs, token = [], ""
        while True:
            r = self._call("ListJobs", self._pb.ListJobsRequest(states=wanted, page_size=1000, page_token=token))
            jobs.extend(_to_dict(j) for j in r.jobs)
            token = r.next_page_token
            if not token:
                return jobs

    def watch(self, job_id):
        """Yields the job's updates until it ends: {"job": ...} on every state
        change, {"metrics": ...} for rank 0's steps."""
        metadata = [("authorization", "Bearer " + self._token)] if self._token else None
        try:
            for u in self._stub.WatchJob(self._pb.WatchJobRequest(id=job_id), metadata=metadata):
                yield _to_dict(u)
        except self._grpc.RpcError as e:
            raise TrainyardError(e.code().name, e.details()) from None

    def cancel(self, job_id, checkpoint=False):
        """Cancels the job; with `checkpoint`, after a checkpoint."""
        return _to_dict(self._call("CancelJob", self._pb.CancelJobRequest(id=job_id, checkpoint=checkpoint)).job)

    def scale(self, job_id, num_processes):
        """Grows or shrinks a running elastic job to `num_processes` ranks
        (between its elastic.min_processes and num_processes); returns the
        job at once, while ranks join or leave (see its "replicas")."""
        req = self._pb.ScaleJobRequest(id=job_id, num_processes=num_processes)
        return _to_dict(self._call("ScaleJob", req).job)

    def checkpoint(self, job_id, sharded=False, wait=True, timeout=600.0):
        """Asks a running job for a checkpoint; with `wait`, returns it once
        saved (or raises when it failed)."""
        kind = self._pb.SHARDED if sharded else self._pb.CHECKPOINT_TYPE_UNSPECIFIED
        r = self._call("CheckpointJob", self._pb.CheckpointJobRequest(id=job_id, type=kind, wait=wait),
                       timeout=timeout if wait else None)
        return _to_dict(r.checkpoint) if wait else {"request_id": r.request_id}

    def checkpoints(self, job_id):
        return [_to_dict(c) for c in self._call("ListCheckpoints", self._pb.ListCheckpointsRequest(id=job_id))
                .checkpoints]

    def resume(self, job_id, from_checkpoint="", num_processes=0):
        """Starts an ended job again from a checkpoint (default: its latest)."""
        r = self._call("ResumeJob", self._pb.ResumeJobRequest(id=job_id, num_processes=num_processes,
                                                               **{"from": from_checkpoint}))
        return _to_dict(r.job)

    def logs(self, job_id, rank=0, tail_bytes=0):
        """The end of one rank's log, as text."""
        r = self._call("GetLogs", self._pb.GetLogsRequest(id=job_id, rank=rank, tail_bytes=tail_bytes))
        return r.content.decode("utf-8", errors="replace")
