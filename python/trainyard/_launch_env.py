"""The environment `accelerate launch` gives each process, computed by
Accelerate's own launcher code: a script job's ranks get exactly it.

    python -m trainyard._launch_env --config_file FILE --num_processes N \\
        [--num_machines M --machine_rank R --main_process_ip IP --main_process_port P]

Prints one JSON object: every variable the launcher sets or changes (the
rank's own — RANK, LOCAL_RANK, ... — come from torchrun's agent, which
Trainyard's worker plays). Exits 2 with Accelerate's message when it
refuses the arguments.
"""
import json
import os
import sys


def launch_environment(argv):
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env, prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args(list(argv) + ["trainyard-script.py"])
    args, _defaults, _mp = _validate_launch_command(args)
    before = dict(os.environ)
    # As accelerate's launch_command picks its launcher.
    if (args.use_fsdp or args.multi_gpu or args.use_megatron_lm) and not args.cpu:
        env = prepare_multi_gpu_env(args)
    else:
        _cmd, env = prepare_simple_launcher_cmd_env(args)
    return {k: str(v) for k, v in env.items() if before.get(k) != v}


def main():
    try:
        env = launch_environment(sys.argv[1:])
    except (ValueError, SystemExit) as e:
        print(f"accelerate launch refuses this configuration: {e}", file=sys.stderr)
        return 2
    print(json.dumps(env, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
