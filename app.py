"""`python app.py`: serve Sequoia Live on http://127.0.0.1:7860 (or --port, or $GRADIO_SERVER_PORT;
the embedded default pair unless --draft/--target say otherwise). Binds only to --host; no public
share link unless --share."""
from __future__ import annotations

import argparse
import logging
import os
import sys


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python app.py", description="Sequoia Live: watch tree speculative decoding.")
    p.add_argument("--draft", default="default", help="draft model: HF id, local folder, or 'default' (embedded)")
    p.add_argument("--target", default="default", help="target model: HF id, local folder, or 'default' (embedded)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, mps or auto")
    p.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto (fp32 on CPU, bf16 on GPU)")
    p.add_argument("--cpu-kernels", choices=["fast", "default"], default="fast",
                   help="on a CPU: fast = linears packed once (target float16 weights with float32 maths, "
                        "row-independent; draft 4-bit or int8); default = PyTorch's float32 path")
    p.add_argument("--draft-weights", choices=["auto", "nf4", "int8"], default="auto",
                   help="fast kernels: the draft's weights; auto = nf4 (bitsandbytes, CPUs with AVX512-BF16) "
                        "where it runs, else int8")
    g = p.add_argument_group("big targets (accelerate device maps)")
    g.add_argument("--target-device-map", default=None,
                   help="device map for the target: auto, balanced, balanced_low_0, sequential or a JSON file "
                        "{module: device}")
    g.add_argument("--draft-device-map", default=None, help="the same for the draft (default: one device)")
    g.add_argument("--max-memory", default=None, help="per-device limits for device maps, e.g. gpu0=20GiB,cpu=60GiB")
    g.add_argument("--offload-folder", default=None,
                   help="where a device map may offload weights to disk (the page only allows folders inside "
                        "the cache directory, plus this one)")
    p.add_argument("--no-background-refine", dest="background_refine", action="store_false",
                   help="no measuring while idle: neither the settings a plan had to interpolate an "
                        "acceptance vector for (engine/refine.py) nor the device again when its cached "
                        "profile is noisy (engine/reprofile.py)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=None,
                   help="port to serve on (default: $GRADIO_SERVER_PORT, as Gradio reads it, else 7860)")
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    args = p.parse_args(argv)
    given = "--port"
    if args.port is None:   # Gradio's own variable, where set (it was ignored: --port always passed 7860)
        env_port = os.environ.get("GRADIO_SERVER_PORT", "").strip()
        given, args.port = "GRADIO_SERVER_PORT", 7860
        if env_port:
            try:
                args.port = int(env_port)
            except ValueError:
                p.error(f"GRADIO_SERVER_PORT must be a port number (got {env_port!r})")
    if not 0 < args.port < 65536:
        p.error(f"{given} must be between 1 and 65535 (got {args.port})")
    return args


PLACEMENT = ("target_device_map", "draft_device_map", "max_memory", "offload_folder")


def build(args: argparse.Namespace, worker=None):
    """The page around a worker that starts loading the pair at once. Returns (gr.Blocks, AppContext)."""
    from app import create_app, ui
    placement = {k: getattr(args, k) for k in PLACEMENT if getattr(args, k)}
    if worker is None and not getattr(args, "background_refine", True):
        from engine.worker import Worker
        worker = Worker(refine_in_background=False)
    kernels = getattr(args, "cpu_kernels", "fast")
    weights = getattr(args, "draft_weights", "auto")
    if not placement:
        return create_app(args.draft, args.target, args.device, args.dtype, worker=worker, cpu_kernels=kernels,
                          draft_weights=weights)
    from app.state import AppContext, Sessions, load_prompts
    from engine.worker import Worker
    worker = worker or Worker(background_profile=True)
    ctx = AppContext(worker=worker, sessions=Sessions(), prompts=load_prompts()).for_device(args.device)
    worker.load(args.draft, args.target, args.device, args.dtype, cpu_kernels=kernels, draft_weights=weights,
                **placement)
    defaults = {"draft": args.draft, "target": args.target, "device": args.device, "dtype": args.dtype,
                "cpu_kernels": kernels, "draft_weights": weights, **placement}
    return ui.build(ctx, defaults), ctx


def launch_kwargs(args: argparse.Namespace) -> dict:
    from app import launch_options
    return {"server_name": args.host, "server_port": args.port, "share": bool(args.share), "inbrowser": False,
            **launch_options()}


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    demo, ctx = build(args)
    print(f"Sequoia Live on http://{args.host}:{args.port} (models load in the background)", file=sys.stderr)
    try:
        demo.launch(**launch_kwargs(args))
    finally:
        ctx.worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
