"""Writes Accelerate config files the way `accelerate config` does, with the
installed accelerate package's own ClusterConfig, one per combination of
distributed type, mixed precision and FSDP version (with and without layer
classes). Usage: accelerate_configs.py OUT_DIR; prints the file names."""
import os
import sys

from accelerate.commands.config.config_args import ClusterConfig
from accelerate.utils import ComputeEnvironment, DistributedType


def write(out_dir, name, distributed_type, mixed_precision, use_cpu=False, fsdp_config=None):
    config = ClusterConfig(
        compute_environment=ComputeEnvironment.LOCAL_MACHINE,
        distributed_type=distributed_type,
        mixed_precision=mixed_precision,
        use_cpu=use_cpu,
        debug=False,
        num_processes=1 if distributed_type == DistributedType.NO else 2,
        fsdp_config=fsdp_config or {},
    )
    path = os.path.join(out_dir, name + ".yaml")
    config.to_yaml_file(path)
    print(name)


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for mp in ("no", "bf16", "fp16"):
        write(out_dir, f"no-{mp}", DistributedType.NO, mp, use_cpu=True)
        write(out_dir, f"multi_cpu-{mp}", DistributedType.MULTI_CPU, mp, use_cpu=True)
        write(out_dir, f"multi_gpu-{mp}", DistributedType.MULTI_GPU, mp)
        write(out_dir, f"multi_gpu_use_cpu-{mp}", DistributedType.MULTI_GPU, mp, use_cpu=True)
        for version in (1, 2):
            for layers in (False, True):
                fsdp = {"fsdp_version": version, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                        "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False,
                        "fsdp_cpu_ram_efficient_loading": True}
                if version == 1:
                    fsdp.update({"fsdp_sharding_strategy": "FULL_SHARD", "fsdp_backward_prefetch": "BACKWARD_PRE",
                                 "fsdp_forward_prefetch": False, "fsdp_sync_module_states": True,
                                 "fsdp_use_orig_params": True})
                else:
                    fsdp["fsdp_reshard_after_forward"] = True
                if layers:
                    fsdp["fsdp_transformer_layer_cls_to_wrap"] = "GPT2Block"
                suffix = "layers" if layers else "inferred"
                write(out_dir, f"fsdp{version}-{suffix}-{mp}", DistributedType.FSDP, mp, use_cpu=True,
                      fsdp_config=fsdp)


if __name__ == "__main__":
    main(sys.argv[1])
