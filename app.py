"""`python app.py`: serve Sequoia Live on http://127.0.0.1:7860 (the embedded default pair unless
--draft/--target say otherwise). Binds only to --host; no public share link unless --share."""
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
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=7860)
    p.add_argument("--share", action="store_true", help="also open a public gradio.live link (off by default)")
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error(f"--port must be between 1 and 65535 (got {args.port})")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from app import create_app, launch_options
    demo, ctx = create_app(args.draft, args.target, args.device, args.dtype)
    print(f"Sequoia Live on http://{args.host}:{args.port} (models load in the background)", file=sys.stderr)
    try:
        demo.launch(server_name=args.host, server_port=args.port, share=args.share, inbrowser=False,
                    **launch_options())
    finally:
        ctx.worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
