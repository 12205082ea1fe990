"""Builds the `trainyard` package with its gRPC messages: grpcio-tools
generates trainyard/v1/ from the source tree's proto/ into the build, and
the package then needs the protobuf runtime of that generator's major
version (and grpcio)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join("trainyard", "v1", "trainyard.proto")
# The source tree's proto/ beside python/; an sdist carries a copy in proto/.
ROOTS = [os.path.join(HERE, "..", "proto"), os.path.join(HERE, "proto")]


def proto_root():
    for root in ROOTS:
        if os.path.isfile(os.path.join(root, PROTO)):
            return os.path.abspath(root)
    raise SystemExit(f"trainyard: {PROTO} not found in {ROOTS}: build the package from Trainyard's source tree "
                     f"(pip install ./python)")


class BuildWithMessages(build_py):
    def run(self):
        super().run()
        import grpc_tools
        from grpc_tools import protoc
        out = os.path.abspath(self.build_lib)
        os.makedirs(os.path.join(out, "trainyard", "v1"), exist_ok=True)
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        root = proto_root()
        rc = protoc.main(["grpc_tools.protoc", f"-I{root}", f"-I{include}", f"--python_out={out}",
                          f"--grpc_python_out={out}", os.path.join(root, PROTO)])
        if rc != 0:
            raise SystemExit(f"trainyard: grpc_tools.protoc failed on {PROTO} ({rc})")
        open(os.path.join(out, "trainyard", "v1", "__init__.py"), "w").close()


def dependencies():
    # The generated code checks that the protobuf runtime has its major version.
    try:
        from google.protobuf import __version__ as pb
        major, minor = (int(x) for x in pb.split(".")[:2])
        protobuf = f"protobuf>={major}.{minor},<{major + 1}"
    except ImportError:  # metadata only (no grpcio-tools here): any recent protobuf
        protobuf = "protobuf>=4.21"
    return ["grpcio>=1.51", protobuf]


setup(cmdclass={"build_py": BuildWithMessages}, install_requires=dependencies())
