"""trainyard.Client with several coordinators (issue 65), against stand-in
JobServices on loopback (real gRPC servers): a standby answers UNAVAILABLE
naming the leader in the trailing metadata `trainyard-leader`; the client
goes there, passes over what does not connect, never sends a submission on
after an answer whose outcome is unknown, and follows a watch to the new
leader.

    python3 tests/python/client_leader_test.py BUILD/python
"""
import os
import sys
import unittest
from concurrent import futures

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILT = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(REPO, "build", "python")
sys.path.insert(0, os.path.join(REPO, "python"))
import trainyard  # noqa: E402  (the source tree's; its messages from the build)

trainyard.__path__.append(os.path.join(BUILT, "trainyard"))
import grpc  # noqa: E402
from trainyard.client import Client, NotFound, Unavailable, split_addresses  # noqa: E402
from trainyard.v1 import trainyard_pb2 as pb, trainyard_pb2_grpc as rpc  # noqa: E402

DEAD = "127.0.0.1:1"  # nothing listens: the connection is refused
STANDBY = "this coordinator is a standby; "


class Leader(rpc.JobServiceServicer):
    def __init__(self):
        self.submits = 0

    def GetJob(self, request, context):
        if request.id != "job-1":
            context.abort(grpc.StatusCode.NOT_FOUND, f"job {request.id} not found")
        return pb.GetJobResponse(job=pb.Job(id="job-1", state=pb.RUNNING))

    def SubmitJob(self, request, context):
        self.submits += 1
        return pb.SubmitJobResponse(job=pb.Job(id="job-s", state=pb.QUEUED))

    def WatchJob(self, request, context):
        yield pb.WatchJobResponse(job=pb.Job(id=request.id, state=pb.RUNNING))
        yield pb.WatchJobResponse(job=pb.Job(id=request.id, state=pb.SUCCEEDED, reason="done at the new leader"))


class Standby(rpc.JobServiceServicer):
    """Answers as a standby naming `leader` ("": no leader yet), or with
    `stopping` as a coordinator going away (not a standby's answer)."""

    def __init__(self, leader, stopping=False):
        self.leader, self.stopping, self.calls = leader, stopping, 0

    def _answer(self, context):
        self.calls += 1
        if self.stopping:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the coordinator is stopping")
        if self.leader:
            context.set_trailing_metadata((("trainyard-leader", self.leader),))
            context.abort(grpc.StatusCode.UNAVAILABLE, STANDBY + f"the leader is at {self.leader} (term 4)")
        context.abort(grpc.StatusCode.UNAVAILABLE, STANDBY + "no leader yet")

    def GetJob(self, request, context):
        self._answer(context)

    def SubmitJob(self, request, context):
        self._answer(context)

    def WatchJob(self, request, context):  # the job running, then it steps down
        yield pb.WatchJobResponse(job=pb.Job(id=request.id, state=pb.RUNNING))
        self._answer(context)


def serve(servicer):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpc.add_JobServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


class ClientLeaderTest(unittest.TestCase):
    def setUp(self):
        self.leader = Leader()
        self.leader_server, self.leader_addr = serve(self.leader)
        self.servers = [self.leader_server]

    def tearDown(self):
        for s in self.servers:
            s.stop(None)

    def standby(self, leader, stopping=False):
        servicer = Standby(leader, stopping)
        server, addr = serve(servicer)
        self.servers.append(server)
        return servicer, addr

    def test_a_standbys_hint_leads_to_the_leader_even_outside_the_list(self):
        standby, addr = self.standby(self.leader_addr)
        with Client(addr, timeout=5) as c:
            self.assertEqual(c.get("job-1")["state"], "RUNNING")
            self.assertEqual(c.get("job-1")["state"], "RUNNING")  # straight to the leader now
        self.assertEqual(standby.calls, 1)

    def test_unreachable_and_leaderless_coordinators_are_passed_over(self):
        standby, addr = self.standby("")
        with Client(f"{DEAD}, {addr},{self.leader_addr}", timeout=5) as c:
            self.assertEqual(c.get("job-1")["state"], "RUNNING")
            with self.assertRaises(NotFound):  # the leader's refusal is the call's answer
                c.get("job-2")
        self.assertEqual(standby.calls, 1)

    def test_no_leader_says_what_each_coordinator_said(self):
        _, addr = self.standby("")
        with Client(f"{DEAD},{addr}", timeout=5) as c, self.assertRaises(Unavailable) as e:
            c.get("job-1")
        self.assertEqual(e.exception.message, f"no trainyard server of {DEAD},{addr} answered as the leader: "
                                              f"{DEAD}: cannot connect; {addr}: {STANDBY}no leader yet")
        with Client(DEAD, timeout=5) as c, self.assertRaises(Unavailable) as e:  # one address: gRPC's words
            c.get("job-1")
        self.assertNotIn("answered as the leader", e.exception.message)

    def test_a_submission_goes_on_only_where_it_was_not_taken(self):
        _, leaderless = self.standby("")
        with Client(f"{DEAD},{leaderless},{self.leader_addr}", timeout=5) as c:
            self.assertEqual(c.submit({"name": "x"})["id"], "job-s")
        self.assertEqual(self.leader.submits, 1)
        stopping, addr = self.standby("", stopping=True)
        with Client(f"{addr},{self.leader_addr}", timeout=5) as c:
            with self.assertRaises(Unavailable) as e:
                c.submit({"name": "x"})
            self.assertIn("the coordinator is stopping", e.exception.message)
            self.assertEqual(self.leader.submits, 1)
            self.assertEqual(c.get("job-1")["state"], "RUNNING")  # a read goes on

    def test_a_watch_follows_the_job_to_the_new_leader(self):
        _, old = self.standby(self.leader_addr)
        with Client(f"{old},{self.leader_addr}", timeout=5) as c:
            states = [u["job"]["state"] for u in c.watch("job-1") if "job" in u]
        self.assertEqual(states, ["RUNNING", "RUNNING", "SUCCEEDED"])

    def test_split_addresses(self):
        self.assertEqual(split_addresses(" a:1 ,b:2,a:1"), ["a:1", "b:2"])
        with self.assertRaisesRegex(ValueError, "item 2 is empty"):
            split_addresses("a:1,,b:2")
        with self.assertRaisesRegex(ValueError, "item 1 is empty"):
            Client(" ,a:1")


if __name__ == "__main__":
    unittest.main()
