"""``dppo-bench eval``: generate samples (vLLM or HF), convert verl validation dumps to samples."""

from __future__ import annotations

import argparse
from pathlib import Path

from dppo_bench.config import find_setting
from dppo_bench.config.prompts import load_prompt
from dppo_bench.config.specs import load_benchmark
from dppo_bench.eval.generate import HFBackend, SamplingConfig, VLLMBackend, resolve_model, run_generation
from dppo_bench.eval.protocol import sampling_of
from dppo_bench.eval.verl_dump import convert_dump
from dppo_bench.problem_sets.pins import problems_for


def _sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling (default: the benchmark's)")
    g.add_argument("--n", type=int, help="samples per problem")
    g.add_argument("--temperature", type=float)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-tokens", type=int, help="max response tokens")
    g.add_argument("--setting", help="a training setting id or file: max tokens = its max response length")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="generate samples; convert verl validation dumps")
    sub = p.add_subparsers(dest="action", required=True)

    gen = sub.add_parser("generate", help="n samples per problem into a resumable samples.jsonl.gz")
    gen.add_argument("--benchmark", required=True)
    gen.add_argument("--model", required=True, help="an HF model directory, a verl checkpoint, or a hub model id")
    gen.add_argument("--out", type=Path, required=True, help="samples.jsonl.gz (resumed when it exists)")
    gen.add_argument("--backend", choices=["vllm", "hf"], default="vllm")
    gen.add_argument("--data", type=Path, help="a normalized problems file (default: the benchmark's source)")
    gen.add_argument("--prompt", help="prompt template id (default: the benchmark's)")
    gen.add_argument("--seed", type=int, default=0)
    _sampling_args(gen)
    gen.add_argument("--chunk", type=int, default=64, help="problems per backend call (the resume granularity)")
    hf = gen.add_argument_group("hf backend")
    hf.add_argument("--device", default="cpu")
    hf.add_argument("--batch-size", type=int, default=0, help="samples per generate call (default: n)")
    vl = gen.add_argument_group("vllm backend")
    vl.add_argument("--tensor-parallel-size", type=int, default=1)
    vl.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    vl.add_argument("--max-model-len", type=int)
    vl.add_argument("--dtype", default="auto")
    gen.set_defaults(func=generate)

    conv = sub.add_parser("convert-verl-dump", help="verl's <validation_data_dir>/<step>.jsonl -> samples file")
    conv.add_argument("--benchmark", required=True)
    conv.add_argument("--dump", type=Path, required=True, help="a dump file, or the validation_data_dir")
    conv.add_argument("--step", type=int, help="with a directory: the step (default: the latest)")
    conv.add_argument("--out", type=Path, required=True)
    conv.add_argument("--model", default="verl run", help="what generated it (recorded in the header)")
    conv.add_argument("--data", type=Path, help="a normalized problems file (default: the benchmark's source)")
    _sampling_args(conv)
    conv.set_defaults(func=convert)


def _max_tokens(spec, args: argparse.Namespace) -> int:
    """--max-tokens, else the setting's max response length (what its online validation generates), else the
    benchmark's."""
    if args.max_tokens:
        return args.max_tokens
    if args.setting:
        return find_setting(args.setting).train.max_response_length
    return spec.sampling.max_tokens


def _sampling(spec, args: argparse.Namespace, seed: int | None) -> dict:
    flags = {"n": args.n, "temperature": args.temperature, "top_p": args.top_p}
    out = sampling_of(spec, _max_tokens(spec, args), **flags)
    return out if seed is None else {**out, "seed": seed}


def generate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    spec = load_benchmark(args.benchmark)
    problems = problems_for(spec, args.data)
    template = load_prompt(args.prompt or spec.prompt)
    sampling = SamplingConfig(**_sampling(spec, args, args.seed))
    model = resolve_model(args.model)
    if args.backend == "hf":
        backend = HFBackend(model.path, sampling, device=args.device, batch_size=args.batch_size)
    else:
        kwargs = {"tensor_parallel_size": args.tensor_parallel_size, "dtype": args.dtype}
        kwargs["gpu_memory_utilization"] = args.gpu_memory_utilization
        if args.max_model_len:
            kwargs["max_model_len"] = args.max_model_len
        backend = VLLMBackend(model.path, sampling, **kwargs)
    with tqdm(total=len(problems.problems), desc=f"{spec.id} problems", unit="problem") as bar:
        summary = run_generation(
            backend,
            model,
            problems.problems,
            template,
            sampling,
            args.out,
            benchmark=spec.id,
            data_sha256=problems.sha256,
            chunk=args.chunk,
            progress=lambda done, _total: bar.update(done - bar.n),
        )
    dropped = f", dropped {summary['dropped_bytes']} bytes of an interrupted write" if summary["dropped_bytes"] else ""
    print(
        f"{args.out}: {summary['generated']} problems generated, {summary['already_complete']} already complete"
        f"{dropped} ({model.kind} model {model.path})"
    )
    return 0


def convert(args: argparse.Namespace) -> int:
    spec = load_benchmark(args.benchmark)
    problems = problems_for(spec, args.data)
    summary = convert_dump(
        args.dump,
        problems,
        args.out,
        benchmark=spec.id,
        model=args.model,
        sampling=_sampling(spec, args, None),
        template=spec.prompt,
        step=args.step,
    )
    counts = sorted(set(summary["problems"].values()))
    print(
        f"{args.out}: {sum(summary['problems'].values())} samples of {len(summary['problems'])} problems "
        f"(per problem: {counts}) from {summary['dump']}; {summary['skipped_rows']} rows of other sets skipped"
    )
    return 0
