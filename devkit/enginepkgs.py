"""Small vllm, ai-dynamo and flashinfer-python packages in the shapes of the published ones.

Shared by the tests (the extractor is tested on them) and the benchmarks (which must not import test
helpers). Each package holds the code patterns `stackpin engines add` reads in the real releases,
written small and from scratch here: vLLM's config dataclasses under a `@dataclass_transform`
decorator, `get_kwargs(Config)` spread into `add_argument`, dict-literal and in-place overrides,
a FlexibleArgumentParser that swaps in a boolean action with an inverse-prefix map, deprecation
messages, `vllm/envs.py` with its TYPE_CHECKING block; Dynamo's option helpers with env vars,
obsolete flags and `Deprecated(...)`; FlashInfer's environment reads. The archives are byte-stable
(fixed times and order), so their sha256 is too.
"""

from __future__ import annotations

import io
import tarfile
import textwrap
import zipfile
from pathlib import Path

EPOCH = (2026, 1, 1, 0, 0, 0)
MTIME = 1767225600


def _code(template: str, **subs: str) -> str:
    """A dedented source template with its @NAME@ placeholders filled (after dedenting, so a value's
    own indentation is relative to the file)."""
    text = textwrap.dedent(template)
    for key, value in subs.items():
        text = text.replace(f"@{key}@", value)
    return text


def _vllm_sources(version: str, inverse_action: bool, newer: bool, *, rename: bool = False,
                  remove: bool = False, serve: bool = False) -> dict[str, str]:
    """vllm/... sources. `inverse_action`: the parser registers an --enable-x/--disable-x action (as
    0.33.0 does); without it only argparse's --no-x exist (as up to 0.31.0). `newer`: a later release
    with one flag, one speculative method and one env var more, and one default changed. `rename`:
    --gdn-backend renamed --linear-attn-backend, the old string kept and deprecated in the words vLLM
    uses ("... is deprecated ... Use --x instead."). `remove`: --disable-custom-all-reduce gone.
    `serve`: the other flags render writes for a stack (--max-model-len, ...), so a stack on it renders."""
    methods = '"ngram", EagleModelTypes' + (', DSparkModelTypes' if newer else "")
    block_default = "32" if newer else "16"
    extra_field = "\n    kv_offload_gib: float = 0.0" if newer else ""
    extra_arg = ('\n        cache_group.add_argument("--kv-offload-gib", **cache_kwargs["kv_offload_gib"])'
                 if newer else "")
    extra_env = '\n    "VLLM_NEW_KNOB": lambda: os.getenv("VLLM_NEW_KNOB", "1"),' if newer else ""
    extra_env_decl = '\n    VLLM_NEW_KNOB: str = "1"' if newer else ""
    register = ('self.register("action", BooleanOptionalAction, InverseAction)' if inverse_action
                else "self.hint = None")
    served = "".join(f'\n        parser.add_argument("{flag}", type=str, default=None, help="Served.")' for flag in (
        "--revision", "--pipeline-parallel-size", "--data-parallel-size", "--max-model-len", "--max-num-seqs",
        "--max-num-batched-tokens", "--kv-events-config")) if serve else ""
    custom_all_reduce = "" if remove else (
        '\n        group.add_argument(\n'
        '            "--disable-custom-all-reduce", **parallel_kwargs["disable_custom_all_reduce"]\n'
        '        )')
    # The renamed option registered, the old string kept with vLLM's deprecation wording in its help.
    renamed = textwrap.indent(textwrap.dedent("""\
        parser.add_argument(
            "--linear-attn-backend", choices=["triton", "flashinfer"], default=None, help="Linear backend."
        )
        parser.add_argument(
            "--gdn-backend",
            choices=["triton", "flashinfer"],
            default=None,
            help="--gdn-backend is deprecated and will be removed in v9.3.0. "
            "Use --linear-attn-backend instead.",
        )"""), " " * 8).lstrip()
    gdn = renamed if rename else (
        'parser.add_argument(\n'
        '            "--gdn-backend", choices=["triton", "flashinfer"], default=None, help="GDN backend."\n'
        '        )')
    return {
        "vllm/__init__.py": f'__version__ = "{version}"\n',
        "vllm/config/__init__.py": textwrap.dedent("""\
            from vllm.config.cache import CacheConfig
            from vllm.config.compilation import CompilationConfig, CUDAGraphMode, PassConfig
            from vllm.config.kernel import KernelConfig
            from vllm.config.parallel import ParallelConfig
            from vllm.config.speculative import SpeculativeConfig
            from vllm.config.vllm import OptimizationLevel, VllmConfig
            """),
        "vllm/config/utils.py": textwrap.dedent("""\
            from typing import dataclass_transform

            from pydantic import Field
            from pydantic.dataclasses import dataclass


            @dataclass_transform(field_specifiers=(Field,))
            def config(cls=None, *, config=None):
                def wrap(c):
                    return dataclass(c, config=config)
                return wrap if cls is None else wrap(cls)
            """),
        "vllm/config/cache.py": _code("""\
            from typing import Literal

            from vllm.config.utils import config

            CacheDType = Literal["auto", "fp8", "fp8_ds_mla"]
            HashAlgo = Literal["sha256", "xxhash"]
            DEFAULT_BLOCK = @BLOCK@


            @config
            class CacheConfig:
                block_size: int = DEFAULT_BLOCK
                cache_dtype: CacheDType | str = "auto"
                enable_prefix_caching: bool | None = None
                gpu_memory_utilization: float = 0.9
                prefix_caching_hash_algo: HashAlgo = "sha256"@EXTRA@
            """, BLOCK=block_default, EXTRA=extra_field),
        "vllm/config/parallel.py": textwrap.dedent("""\
            from typing import Literal

            from vllm.config.utils import config

            All2AllBackend = Literal["naive", "allgather_reducescatter", "passthrough"]
            PASSTHROUGH_ALL2ALL_BACKEND = "passthrough"


            @config
            class ParallelConfig:
                tensor_parallel_size: int = 1
                enable_expert_parallel: bool = False
                all2all_backend: All2AllBackend = "allgather_reducescatter"
                disable_custom_all_reduce: bool = False
            """),
        "vllm/config/compilation.py": textwrap.dedent("""\
            import enum
            from dataclasses import field

            from pydantic import Field

            from vllm.config.utils import config


            class CUDAGraphMode(enum.Enum):
                NONE = 0
                PIECEWISE = 1
                FULL = 2


            @config
            class PassConfig:
                fuse_norm_quant: bool = False


            @config
            class CompilationConfig:
                mode: int | None = None
                cudagraph_mode: CUDAGraphMode | None = None
                cudagraph_capture_sizes: list[int] | None = None
                pass_config: PassConfig = Field(default_factory=PassConfig)
                compilation_time: float = field(default=0.0, init=False)
            """),
        "vllm/config/kernel.py": textwrap.dedent("""\
            from typing import Literal

            from vllm.config.utils import config

            MoEBackend = Literal["auto", "cutlass", "flashinfer_trtllm"]


            @config
            class KernelConfig:
                moe_backend: MoEBackend = "auto"
                enable_flashinfer_autotune: bool | None = None
            """),
        "vllm/config/speculative.py": _code("""\
            from typing import Literal

            from vllm.config.utils import config

            MTPModelTypes = Literal["deepseek_mtp", "mtp"]
            DSparkModelTypes = Literal["dspark"]
            EagleModelTypes = Literal["eagle", MTPModelTypes]
            SpeculativeMethod = Literal[@METHODS@]


            @config
            class SpeculativeConfig:
                method: SpeculativeMethod | None = None
                num_speculative_tokens: int | None = None
            """, METHODS=methods),
        "vllm/config/vllm.py": textwrap.dedent("""\
            from enum import IntEnum
            from typing import Literal

            from pydantic import ConfigDict, Field

            from vllm.config.compilation import CompilationConfig
            from vllm.config.kernel import KernelConfig
            from vllm.config.speculative import SpeculativeConfig
            from vllm.config.utils import config


            class OptimizationLevel(IntEnum):
                O0 = 0
                O1 = 1
                O2 = 2
                O3 = 3


            PerformanceMode = Literal["balanced", "interactivity", "throughput"]


            @config(config=ConfigDict(arbitrary_types_allowed=True))
            class VllmConfig:
                compilation_config: CompilationConfig = Field(default_factory=CompilationConfig)
                speculative_config: SpeculativeConfig | None = None
                kernel_config: KernelConfig = Field(default_factory=KernelConfig)
                performance_mode: PerformanceMode = "balanced"
                optimization_level: OptimizationLevel = OptimizationLevel.O2
            """),
        "vllm/utils/__init__.py": "",
        "vllm/utils/argparse_utils.py": _code("""\
            import argparse
            from argparse import ArgumentParser, BooleanOptionalAction


            class InverseAction(BooleanOptionalAction):
                \"\"\"A boolean action that also answers to the opposite prefix.

                `--no-enable-x` and `--no-disable-x` keep working for old command lines but are
                hidden from help.
                \"\"\"

                _inverse_prefixes = {"--enable-": "--disable-", "--disable-": "--enable-"}

                def __init__(self, option_strings, dest, **kwargs):
                    super().__init__(option_strings, dest, **kwargs)
                    inverses = [
                        inverse + s.removeprefix(prefix)
                        for s in option_strings
                        for prefix, inverse in self._inverse_prefixes.items()
                        if s.startswith(prefix)
                    ]
                    self.negatives = {s for s in self.option_strings if s not in option_strings} | set(inverses)
                    self.visible_option_strings = (
                        [*option_strings, *inverses] if inverses else list(self.option_strings)
                    )
                    self.option_strings = [*self.option_strings, *inverses]

                def __call__(self, parser, namespace, values, option_string=None):
                    setattr(namespace, self.dest, option_string not in self.negatives)


            def _after_register(action):
                if isinstance(action, InverseAction):
                    action.option_strings = action.visible_option_strings


            class FlexibleArgumentParser(ArgumentParser):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    @REGISTER@

                def add_argument(self, *args, **kwargs):
                    action = super().add_argument(*args, **kwargs)
                    _after_register(action)
                    return action

                def parse_args(self, args=None, namespace=None):
                    out = []
                    for arg in args or []:
                        if arg.startswith("--") and "." not in arg:
                            out.append(arg.replace("_", "-"))
                        elif arg.startswith("-O") and arg != "-O":
                            out += ["--optimization-level", arg[2:]]
                        else:
                            out.append(arg)
                    return super().parse_args(out, namespace)
            """, REGISTER=register),
        "vllm/engine/__init__.py": "",
        "vllm/engine/arg_utils.py": _code("""\
            import argparse
            import json
            import warnings
            from dataclasses import dataclass
            from typing import Any, get_args

            from vllm.config import (
                CacheConfig,
                CompilationConfig,
                KernelConfig,
                ParallelConfig,
                SpeculativeConfig,
                VllmConfig,
            )
            from vllm.config.parallel import PASSTHROUGH_ALL2ALL_BACKEND
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            _OLD_LOG_FILE_MESSAGE = (
                "--log-file is deprecated and will be removed in v9.9.0. "
                "Use --logging-config.file instead."
            )
            _CASCADE_MESSAGE = (
                "--disable-cascade-attn is deprecated and has no effect. It will be removed in v9.9.0."
            )
            _LATE_MESSAGE = "priority (--op-priority) is deprecated because it does nothing."


            class OldLogFileAction(argparse.Action):
                def __call__(self, parser, namespace, values, option_string=None):
                    warnings.warn(_OLD_LOG_FILE_MESSAGE, stacklevel=1)
                    setattr(namespace, self.dest, values)


            def parse_int(value: str) -> int:
                return int(value)


            def get_kwargs(cls) -> dict[str, dict[str, Any]]:
                kwargs: dict[str, dict[str, Any]] = {}
                for name in getattr(cls, "__dataclass_fields__", {}):
                    kwargs[name] = {}
                    by_text = {"gpu_memory_utilization"}
                    if name == "block_size":
                        kwargs[name]["type"] = parse_int
                    elif name in by_text:
                        kwargs[name]["type"] = float
                return kwargs


            @dataclass
            class EngineArgs:
                model: str = "facebook/opt-125m"
                tensor_parallel_size: int = ParallelConfig.tensor_parallel_size
                enable_prefix_caching: bool | None = None
                disable_cascade_attn: bool | None = None

                @staticmethod
                def add_cli_args(parser: FlexibleArgumentParser) -> FlexibleArgumentParser:
                    parser.add_argument("--model", type=str, default=EngineArgs.model, help="Model name.")
                    parser.add_argument(
                        "--disable-cascade-attn",
                        action=argparse.BooleanOptionalAction,
                        default=None,
                        help=_CASCADE_MESSAGE,
                    )
                    parallel_kwargs = get_kwargs(ParallelConfig)
                    parallel_kwargs["all2all_backend"]["choices"].remove(PASSTHROUGH_ALL2ALL_BACKEND)
                    group = parser.add_argument_group("ParallelConfig")
                    group.add_argument("--tensor-parallel-size", "-tp", **parallel_kwargs["tensor_parallel_size"])
                    group.add_argument("--enable-expert-parallel", "-ep", **parallel_kwargs["enable_expert_parallel"])
                    group.add_argument("--all2all-backend", **parallel_kwargs["all2all_backend"])@REDUCE@
                    group.add_argument("--data-parallel-rank", "-dpn", type=parse_int, help="Rank.")

                    cache_kwargs = get_kwargs(CacheConfig)
                    cache_group = parser.add_argument_group("CacheConfig")
                    cache_group.add_argument("--block-size", **cache_kwargs["block_size"])
                    cache_group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
                    cache_group.add_argument(
                        "--gpu-memory-utilization",
                        "--device-memory-utilization",
                        **cache_kwargs["gpu_memory_utilization"],
                    )
                    cache_group.add_argument(
                        "--enable-prefix-caching",
                        **{**cache_kwargs["enable_prefix_caching"], "default": None},
                    )
                    cache_group.add_argument(
                        "--prefix-caching-hash-algo", **cache_kwargs["prefix_caching_hash_algo"]
                    )@EXTRA@

                    kernel_kwargs = get_kwargs(KernelConfig)
                    moe_kwargs = kernel_kwargs["moe_backend"]
                    moe_kwargs["type"] = lambda s: s.lower()
                    parser.add_argument("--moe-backend", **moe_kwargs)
                    parser.add_argument(
                        "--enable-flashinfer-autotune", **kernel_kwargs["enable_flashinfer_autotune"]
                    )
                    parser.add_argument("--op-priority", type=str, default=None, help="Op priority.")

                    vllm_kwargs = get_kwargs(VllmConfig)
                    vllm_kwargs["speculative_config"]["type"] = json.loads
                    parser.add_argument("--speculative-config", "-sc", **vllm_kwargs["speculative_config"])
                    parser.add_argument("--compilation-config", "-cc", **vllm_kwargs["compilation_config"])
                    parser.add_argument("--performance-mode", **vllm_kwargs["performance_mode"])
                    parser.add_argument("--optimization-level", **vllm_kwargs["optimization_level"])
                    parser.add_argument(
                        "--log-file",
                        default=argparse.SUPPRESS,
                        action=OldLogFileAction,
                        help=_OLD_LOG_FILE_MESSAGE,
                    )
                    parser.add_argument("--disable-log-stats", action="store_true", help="No stats.")
                    @GDN@@SERVED@
                    return parser


            @dataclass
            class AsyncEngineArgs(EngineArgs):
                enable_log_requests: bool = False

                @staticmethod
                def add_cli_args(parser: FlexibleArgumentParser, async_args_only: bool = False):
                    if not async_args_only:
                        parser = EngineArgs.add_cli_args(parser)
                    parser.add_argument(
                        "--enable-log-requests",
                        action=argparse.BooleanOptionalAction,
                        default=AsyncEngineArgs.enable_log_requests,
                        help="Log requests.",
                    )
                    return parser
            """, EXTRA=extra_arg, REDUCE=custom_all_reduce, GDN=gdn, SERVED=served),
        "vllm/envs.py": _code("""\
            import os
            from typing import TYPE_CHECKING, Any, Callable

            if TYPE_CHECKING:
                VLLM_CACHE_ROOT: str = os.path.expanduser("~/.cache/vllm")
                VLLM_ENGINE_READY_TIMEOUT_S: int = 600
                VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR: str | None = None
                VLLM_KV_CACHE_LAYOUT: str | None = None@DECL@


            def env_with_choices(name, default, choices):
                return lambda: os.getenv(name, default)


            environment_variables: dict[str, Callable[[], Any]] = {
                "VLLM_CACHE_ROOT": lambda: os.path.expanduser(os.getenv("VLLM_CACHE_ROOT", "~/.cache/vllm")),
                "VLLM_ENGINE_READY_TIMEOUT_S": lambda: int(os.getenv("VLLM_ENGINE_READY_TIMEOUT_S", "600")),
                "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": lambda: os.getenv("VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"),
                "VLLM_KV_CACHE_LAYOUT": env_with_choices("VLLM_KV_CACHE_LAYOUT", None, ["NHD", "HND"]),@ENV@
            }
            """, DECL=extra_env_decl, ENV=extra_env),
        "vllm/v1/attention/backends/registry.py": textwrap.dedent("""\
            import enum


            class AttentionBackendEnum(enum.Enum):
                FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
                FLASHINFER_MLA_SPARSE = "vllm.v1.attention.backends.mla.FlashInferMLASparseBackend"
            """),
        "vllm/model_executor/models/registry.py": textwrap.dedent("""\
            _TEXT_GENERATION_MODELS = {
                "DeepseekV41ForCausalLM": ("deepseek_v41", "DeepseekV41ForCausalLM"),
                "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
            }
            _PREVIOUSLY_SUPPORTED_MODELS = {"OldForCausalLM": "0.10.0"}
            """),
    }


def _metadata(name: str, version: str, requires: list[str]) -> str:
    lines = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}", "License-Expression: Apache-2.0"]
    return "\n".join(lines + [f"Requires-Dist: {r}" for r in requires]) + "\n\n"


def _tar(path: Path, top: str, files: dict[str, str]) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            data = files[name].encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), MTIME, 0o644
            archive.addfile(info, io.BytesIO(data))
    import gzip

    path.write_bytes(gzip.compress(buffer.getvalue(), mtime=MTIME))
    return path


def _zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            archive.writestr(zipfile.ZipInfo(name, EPOCH), files[name])
    return path


def vllm_requires(flashinfer: str = "0.7.2.post1", torch: str = "2.14.0") -> list[str]:
    return ["regex", f"torch=={torch}", f"flashinfer-python=={flashinfer}",
            'zentorch==2.14.0.1; extra == "zen"']


def vllm_sdist(directory: Path, version: str = "9.0.0", *, inverse_action: bool = True, newer: bool = False,
               requires: list[str] | None = None, rename: bool = False, remove: bool = False,
               serve: bool = False) -> Path:
    """A vllm-<version>.tar.gz with PKG-INFO at its top, as PyPI publishes vLLM's sdists."""
    files = _vllm_sources(version, inverse_action, newer, rename=rename, remove=remove, serve=serve)
    files["PKG-INFO"] = _metadata("vllm", version, vllm_requires() if requires is None else requires)
    files["setup.py"] = "from setuptools import setup\nsetup()\n"
    files["tests/test_nothing.py"] = "def test_nothing():\n    pass\n"
    return _tar(directory / f"vllm-{version}.tar.gz", f"vllm-{version}", files)


def vllm_wheel(directory: Path, version: str = "9.0.0", *, inverse_action: bool = True, newer: bool = False) -> Path:
    files = _vllm_sources(version, inverse_action, newer)
    files[f"vllm-{version}.dist-info/METADATA"] = _metadata("vllm", version, vllm_requires())
    files[f"vllm-{version}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
    return _zip(directory / f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl", files)


def _dynamo_sources(version: str, serve: bool = False) -> dict[str, str]:
    """`serve`: the worker's parser flags and the frontend's --migration-limit, which render writes."""
    worker = "".join(f"""
        add_argument(
            g, flag_name="{flag}", env_var="DYN_{flag[2:].upper().replace('-', '_')}", default=None, help="Parser."
        )""" for flag in ("--dyn-tool-call-parser", "--dyn-reasoning-parser")) if serve else ""
    frontend = """
        add_argument(
            g, flag_name="--migration-limit", env_var="DYN_MIGRATION_LIMIT", default=0, arg_type=int, help="Retries."
        )""" if serve else ""
    return {
        "dynamo/__init__.py": "",
        "dynamo/common/__init__.py": "",
        "dynamo/common/configuration/__init__.py": "",
        "dynamo/common/configuration/utils.py": textwrap.dedent("""\
            import argparse
            import os
            from dataclasses import dataclass
            from typing import Any, Callable, Optional


            @dataclass(frozen=True)
            class Deprecated:
                replacement: str
                remove_in: str


            def add_argument(
                parser,
                *,
                flag_name: str,
                env_var: str,
                default: Any,
                help: str,
                obsolete_flag: Optional[str] = None,
                arg_type: Optional[Callable[..., Any]] = str,
                deprecated: Optional[Deprecated] = None,
                **kwargs: Any,
            ) -> None:
                names = [flag_name]
                if obsolete_flag:
                    names.append(obsolete_flag)
                value = os.environ.get(env_var, default)
                if arg_type is not None:
                    kwargs["type"] = arg_type
                parser.add_argument(*names, default=value, help=help, **kwargs)


            def add_negatable_bool_argument(
                parser, *, flag_name: str, env_var: str, default: Optional[bool], help: str,
                obsolete_flag: Optional[str] = None, deprecated: Optional[Deprecated] = None,
            ) -> None:
                add_argument(
                    parser,
                    flag_name=flag_name,
                    env_var=env_var,
                    default=default,
                    help=help,
                    obsolete_flag=obsolete_flag,
                    arg_type=None,
                    action=argparse.BooleanOptionalAction,
                    deprecated=deprecated,
                )


            def nullable_float(value: str) -> Optional[float]:
                return None if value in ("", "None") else float(value)
            """),
        "dynamo/common/configuration/groups/__init__.py": "",
        "dynamo/common/configuration/groups/router_args.py": textwrap.dedent("""\
            from dynamo.common.configuration.utils import (
                Deprecated,
                add_argument,
                add_negatable_bool_argument,
                nullable_float,
            )


            def _policy(parameter: str) -> Deprecated:
                return Deprecated(f"{parameter} in --router-policy-config", remove_in="v9.7")


            class RouterArgGroup:
                def add_arguments(self, parser) -> None:
                    g = parser.add_argument_group("Router")
                    add_argument(
                        g,
                        flag_name="--router-mode",
                        env_var="DYN_ROUTER_MODE",
                        default="round-robin",
                        help="How requests are routed.",
                        choices=["round-robin", "random", "kv"],
                    )
                    add_negatable_bool_argument(
                        g,
                        flag_name="--router-kv-events",
                        obsolete_flag="--kv-events",
                        env_var="DYN_ROUTER_USE_KV_EVENTS",
                        default=True,
                        help="Use KV events.",
                    )
                    add_argument(
                        g,
                        flag_name="--router-temperature",
                        env_var="DYN_ROUTER_TEMPERATURE",
                        default=0.0,
                        arg_type=nullable_float,
                        deprecated=_policy("temperature"),
                        help="Softmax temperature.",
                    )
                    add_negatable_bool_argument(
                        g,
                        flag_name="--load-aware",
                        env_var="DYN_ROUTER_LOAD_AWARE",
                        default=False,
                        deprecated=Deprecated("the load-only policy", remove_in="v9.7"),
                        help="Load-aware preset.",
                    )
                    add_argument(
                        g,
                        flag_name="--http-pool-timeout",
                        env_var="DYN_HTTP_POOL_TIMEOUT",
                        default=60.0,
                        arg_type=float,
                        help="[deprecated, no-op] Configured a removed backend. Accepted but ignored.",
                    )
            """),
        "dynamo/vllm/__init__.py": "",
        "dynamo/vllm/args.py": textwrap.dedent("""\
            from dynamo.common.configuration.groups.router_args import RouterArgGroup
            from dynamo.vllm.backend_args import DynamoVllmArgGroup
            """),
        "dynamo/vllm/backend_args.py": _code("""\
            from dynamo.common.configuration.utils import add_argument, add_negatable_bool_argument

            MODES = ["agg", "prefill", "decode"]


            class DynamoVllmArgGroup:
                def add_arguments(self, parser) -> None:
                    parser.add_argument("--version", action="version", version="@VERSION@")
                    g = parser.add_argument_group("Dynamo vLLM Options")
                    add_argument(
                        g,
                        flag_name="--disaggregation-mode",
                        env_var="DYN_VLLM_DISAGGREGATION_MODE",
                        default=None,
                        help="Worker mode.",
                        choices=["pd"] + MODES,
                    )
                    add_negatable_bool_argument(
                        g,
                        flag_name="--enable-multimodal",
                        env_var="DYN_VLLM_ENABLE_MULTIMODAL",
                        default=False,
                        help="Multimodal.",
                    )@WORKER@
            """, VERSION=version, WORKER=worker),
        "dynamo/frontend/__init__.py": "",
        "dynamo/frontend/frontend_args.py": _code("""\
            from dynamo.common.configuration.groups.router_args import RouterArgGroup
            from dynamo.common.configuration.utils import add_argument


            class FrontendArgGroup:
                def add_arguments(self, parser) -> None:
                    g = parser.add_argument_group("Frontend")
                    add_argument(
                        g,
                        flag_name="--http-port",
                        env_var="DYN_HTTP_PORT",
                        default=8000,
                        arg_type=int,
                        help="HTTP port.",
                    )@FRONTEND@
            """, FRONTEND=frontend),
        "dynamo/planner/__init__.py": "",
        "dynamo/planner/connectors/clients/kubernetes_api.py": 'DYNAMO_API_VERSION = "v1beta1"\n',
    }


def _dynamo_sglang_sources() -> dict[str, str]:
    """dynamo.sglang's argument parsing in its real shape (ai-dynamo 1.6.1's dynamo/sglang/args.py,
    backend_args.py, _compat.py): its own options, SGLang's parser from ServerArgs.add_cli_args, a legacy
    spelling added to that parser, `gms` added to --load-format, --disaggregation-mode values rewritten."""
    return {
        "dynamo/common/constants.py": textwrap.dedent("""\
            from enum import Enum


            class DisaggregationMode(Enum):
                AGGREGATED = "agg"
                PREFILL = "prefill"
                DECODE = "decode"
                ENCODE = "encode"
            """),
        "dynamo/sglang/__init__.py": "",
        "dynamo/sglang/_compat.py": textwrap.dedent("""\
            import argparse


            def add_sglang_cli_compat(parser: argparse.ArgumentParser) -> None:
                legacy_flag = "--disable-piecewise-cuda-graph"
                options = parser._option_string_actions
                if legacy_flag in options or "--cuda-graph-backend-prefill" not in options:
                    return
                parser.add_argument(
                    legacy_flag,
                    dest="cuda_graph_backend_prefill",
                    action="store_const",
                    const="disabled",
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                )
            """),
        "dynamo/sglang/backend_args.py": textwrap.dedent("""\
            from dynamo.common.configuration.utils import add_argument, add_negatable_bool_argument


            class DynamoSGLangArgGroup:
                def add_arguments(self, parser) -> None:
                    g = parser.add_argument_group("Dynamo SGLang Options")
                    add_negatable_bool_argument(
                        g,
                        flag_name="--enable-multimodal",
                        env_var="DYN_SGL_ENABLE_MULTIMODAL",
                        default=False,
                        help="Multimodal.",
                    )
                    add_argument(
                        g,
                        flag_name="--sglang-trace-level",
                        env_var="SGLANG_TRACE_LEVEL",
                        default=2,
                        arg_type=int,
                        choices=[1, 2, 3, 4],
                        help="Trace level.",
                    )
            """),
        "dynamo/sglang/args.py": textwrap.dedent("""\
            import argparse

            from sglang.srt.server_args import ServerArgs

            from dynamo.common.configuration.groups.router_args import RouterArgGroup
            from dynamo.common.constants import DisaggregationMode
            from dynamo.sglang._compat import add_sglang_cli_compat
            from dynamo.sglang.backend_args import DynamoSGLangArgGroup

            PREFILL_DECODE_DISAGGREGATION_MODE = "pd"


            def _normalize(unknown, config):
                mode = _last(unknown, "--disaggregation-mode")
                if mode in {
                    DisaggregationMode.AGGREGATED.value,
                    PREFILL_DECODE_DISAGGREGATION_MODE,
                }:
                    unknown = _set(unknown, "--disaggregation-mode", "null")
                    mode = "null"
                if mode == DisaggregationMode.ENCODE.value:
                    config.multimodal_encode_worker = True
                    return _remove(unknown, "--disaggregation-mode")
                return unknown


            async def parse_args(args):
                parser = argparse.ArgumentParser()
                DynamoSGLangArgGroup().add_arguments(parser)
                sglang_only_parser = argparse.ArgumentParser(add_help=False)
                ServerArgs.add_cli_args(sglang_only_parser)
                add_sglang_cli_compat(sglang_only_parser)
                for action in sglang_only_parser._actions:
                    if getattr(action, "dest", None) == "load_format" and action.choices:
                        action.choices = list(action.choices) + ["gms"]
                        break
                dynamo_args, unknown = parser.parse_known_args(args)
                return sglang_only_parser.parse_args(_normalize(unknown, dynamo_args))
            """),
    }


def dynamo_wheel(directory: Path, version: str = "9.0.0", vllm: str = "9.0.0", nixl: str = "1.4.1", *,
                 serve: bool = False, sglang: str = "0.5.21", sglang_nixl: str | None = None,
                 sglang_worker: bool = False) -> Path:
    """An ai_dynamo-<version>-py3-none-any.whl whose vllm extra pins vllm and nixl, its sglang extra sglang
    (and nixl: `sglang_nixl`); `sglang_worker`: with dynamo.sglang's argument parsing."""
    files = _dynamo_sources(version, serve) | (_dynamo_sglang_sources() if sglang_worker else {})
    extra = [f"nixl[cu13]=={sglang_nixl}; extra == 'sglang'"] if sglang_nixl else []
    files[f"ai_dynamo-{version}.dist-info/METADATA"] = _metadata("ai-dynamo", version, [
        f"ai-dynamo-runtime=={version}", "pyzmq>=26.0.0", f"nixl[cu13]=={nixl}; extra == 'vllm'",
        f"vllm[flashinfer]=={vllm}; extra == 'vllm'", f"sglang=={sglang}; extra == 'sglang'", *extra])
    return _zip(directory / f"ai_dynamo-{version}-py3-none-any.whl", files)


def sglang_pins_wheel(directory: Path, version: str, flashinfer: str, torch: str = "2.13.0",
                      kernel: str = "0.4.7") -> Path:
    """An sglang-<version>-py3-none-any.whl holding only its METADATA, pinning FlashInfer, torch and
    sglang-kernel as SGLang's wheels do (flashinfer_python[cu13]==X): what `upgrade check` reads."""
    files = {f"sglang-{version}.dist-info/METADATA": _metadata("sglang", version, [
        "aiohttp", f"flashinfer_python[cu13]=={flashinfer}", f"sglang-kernel=={kernel}", f"torch=={torch}",
        'sglang[diffusion]; extra == "all"'])}
    return _zip(directory / f"sglang-{version}-py3-none-any.whl", files)


def flashinfer_wheel(directory: Path, version: str = "9.0.0") -> Path:
    files = {
        "flashinfer/__init__.py": 'import os\n\nif "FLASHINFER_DISABLE_VERSION_CHECK" in os.environ:\n    pass\n',
        "flashinfer/autotuner.py": textwrap.dedent("""\
            import os

            CACHE = os.environ.get("FLASHINFER_AUTOTUNE_DIR", "~/.cache/flashinfer")
            LEVEL = os.getenv("FLASHINFER_LOGLEVEL", "0")
            ARCH = os.environ["FLASHINFER_CUDA_ARCH_LIST"] if "X" in os.environ else None
            OTHER = os.environ.get("CUDA_HOME")
            """),
        f"flashinfer_python-{version}.dist-info/METADATA": _metadata(
            "flashinfer-python", version, ["apache-tvm-ffi<0.2,>=0.1.11", "torch", "numpy"]),
    }
    return _zip(directory / f"flashinfer_python-{version}-py3-none-any.whl", files)


def upgrade_series(directory: Path) -> Path:
    """An upgrade's releases (tests/test_upgrade_propose.py, `make demo-upgrade`): the stack's Dynamo 9.0.0
    and vLLM 9.0.0; Dynamo 9.1.0, whose vLLM renames --gdn-backend, changes the --block-size default and
    pins FlashInfer 9.1.0; Dynamo 9.2.0, whose vLLM removes --disable-custom-all-reduce. Each carries the
    flags a rendered stack passes (serve=True)."""
    directory.mkdir(parents=True, exist_ok=True)
    vllm_sdist(directory, serve=True), dynamo_wheel(directory, serve=True), flashinfer_wheel(directory)
    newer = vllm_requires(flashinfer="9.1.0")
    vllm_sdist(directory, "9.1.0", newer=True, rename=True, serve=True, requires=newer)
    vllm_sdist(directory, "9.2.0", newer=True, remove=True, serve=True, requires=newer)
    flashinfer_wheel(directory, "9.1.0")
    dynamo_wheel(directory, "9.1.0", vllm="9.1.0", nixl="1.5.0", serve=True)
    dynamo_wheel(directory, "9.2.0", vllm="9.2.0", nixl="1.5.0", serve=True)
    return directory


def _sglang_sources() -> dict[str, str]:
    """sglang/... sources in 0.5.21's shapes: namespace structs whose fields are `A[T, "help"]` or
    `A[T, Arg(...)]` (arg_groups/fields/), collected by server_args.py's `_INPUT_NAMESPACES`; add_cli_args'
    own registrations (choices built when it runs, a deprecated store-true action); the `Envs` registry."""
    return {
        "sglang/__init__.py": "",
        "sglang/srt/__init__.py": "",
        "sglang/srt/arg_groups/__init__.py": "",
        "sglang/srt/arg_groups/arg_utils.py": _code("""\
            from typing import Annotated, Any

            import msgspec

            A = Annotated


            class Arg(msgspec.Struct, frozen=True):
                help: str = ""
                choices: list | None = None
                aliases: list[str] | None = None
                cli_name: str | None = None
                type_parser: Any = None
                nargs: str | None = None
                action: Any = None
                no_cli: bool = False


            def add_cli_args_from_dataclass(parser, cls):
                raise NotImplementedError("read, never run")
            """),
        "sglang/srt/arg_groups/argparse_actions.py": _code("""\
            import argparse


            class DeprecatedStoreTrueAction(argparse.Action):
                def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kw):
                    self.new_flag = new_flag
                    super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kw)

                def __call__(self, parser, namespace, values, option_string=None):
                    setattr(namespace, self.dest, True)
            """),
        "sglang/srt/arg_groups/choices.py": _code("""\
            ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer", "trtllm_mla", "nsa"]
            DISAGG_TRANSFER_BACKEND_CHOICES = ["mooncake", "nixl", "fake"]
            SAMPLING_BACKEND_CHOICES = {"flashinfer", "pytorch"}
            MOE_RUNNER_BACKEND_CHOICES = ["auto", "triton", "flashinfer_trtllm"]

            add_attention_backend_choices = ATTENTION_BACKEND_CHOICES.extend
            """),
        "sglang/srt/arg_groups/fields/__init__.py": "",
        "sglang/srt/arg_groups/fields/model.py": _code("""\
            from __future__ import annotations

            import argparse
            import json
            from typing import List, Literal, Optional

            import msgspec

            from sglang.srt.arg_groups.arg_utils import A, Arg
            from sglang.srt.arg_groups.choices import ATTENTION_BACKEND_CHOICES, DISAGG_TRANSFER_BACKEND_CHOICES
            from sglang.srt.utils.common import human_readable_int, json_list_type


            class Model(msgspec.Struct):
                _NS_PATH = "model"
                model_path: A[str, Arg(help="Path to the weights.", aliases=["--model"])]
                tp_size: A[int, Arg(help="Tensor parallel size.", aliases=["--tensor-parallel-size"])] = 1
                trust_remote_code: A[bool, "Allow custom code."] = False
                enable_lean: A[Optional[bool], "Lean decode; None picks by itself."] = None
                kv_cache_dtype: A[str, Arg(help="KV dtype.", choices=["auto", "fp8_e4m3", "bf16"])] = "auto"
                attention_backend: A[Optional[str], Arg(help="Kernels.", choices=ATTENTION_BACKEND_CHOICES)] = None
                transfer_backend: A[str, Arg(help="Transfer.", choices=DISAGG_TRANSFER_BACKEND_CHOICES,
                                             cli_name="--disaggregation-transfer-backend")] = "mooncake"
                disaggregation_mode: A[Literal["null", "prefill", "decode"], "PD role."] = "null"
                encoder_transfer: A[Literal[None, "mooncake", "nixl"], "Encoder transfer."] = None
                moe_dense_tp: A[Optional[Literal[1, 2]], "Dense TP."] = None
                cuda_graph_bs: A[Optional[List[int]], "Batch sizes."] = None
                context_length: A[Optional[int], Arg(help="Context.", type_parser=human_readable_int)] = None
                json_model_override_args: A[str, Arg(help="JSON.", type_parser=json.loads)] = "{}"
                prefill_ports: A[Optional[List[int]], Arg(help="Ports.", type_parser=json_list_type)] = None
                lora_strict: A[bool, Arg(help="Strict.", action=argparse.BooleanOptionalAction)] = True
                grpc_mode: A[bool, "(Deprecated, use --smg-grpc-mode) Legacy selector."] = False
                internal_only: A[bool, Arg(help="Derived.", no_cli=True)] = False
                ratio: A[float, "A ratio."] = 1024 * 0.5
                reasoning_parser: Optional[str] = None
                skip_ops: A[List[str], "Ops."] = msgspec.field(default_factory=list)
            """),
        "sglang/srt/arg_groups/fields/exec_.py": _code("""\
            from __future__ import annotations

            from typing import Optional

            import msgspec

            from sglang.srt.arg_groups.arg_utils import A, Arg
            from sglang.srt.model_executor.cuda_graph_config import Backend


            class ExecGraph(msgspec.Struct):
                _NS_PATH = "exec.graph"
                cuda_graph_backend_decode: A[Optional[str], Arg(help="Decode graph.", choices=Backend.ALL)] = None
                disable_cuda_graph: A[bool, Arg(no_cli=True)] = False
                sampling_backend: A[Optional[str], Arg(help="Sampling.", no_cli=True)] = None
            """),
        "sglang/srt/model_executor/__init__.py": "",
        "sglang/srt/model_executor/cuda_graph_config.py": _code("""\
            class Backend:
                FULL = "full"
                DISABLED = "disabled"
                ALL = (FULL, DISABLED)
            """),
        "sglang/srt/utils/__init__.py": "",
        "sglang/srt/utils/common.py": _code("""\
            import orjson


            def human_readable_int(value: str) -> int:
                return int(value.rstrip("k")) * (1000 if value.endswith("k") else 1)


            def json_list_type(value):
                return orjson.loads(value)
            """),
        "sglang/srt/parser/__init__.py": "",
        "sglang/srt/parser/reasoning_parser_names.py": 'REASONING_PARSER_NAMES = ["deepseek-r1", "qwen3"]\n',
        "sglang/srt/server_args.py": _code("""\
            from __future__ import annotations

            import argparse
            import sys

            from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass
            from sglang.srt.arg_groups.argparse_actions import DeprecatedStoreTrueAction
            from sglang.srt.arg_groups.choices import SAMPLING_BACKEND_CHOICES
            from sglang.srt.arg_groups.fields.exec_ import ExecGraph
            from sglang.srt.arg_groups.fields.model import Model
            from sglang.srt.environ import envs


            def _reasoning_parser_choices():
                module = sys.modules.get("sglang.srt.parser.reasoning_parser")
                if module is not None:
                    return list(module.ReasoningParser.DetectorMap)
                from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

                return list(REASONING_PARSER_NAMES)


            class ServerArgs:
                @staticmethod
                def add_cli_args(parser: argparse.ArgumentParser):
                    add_cli_args_from_dataclass(parser, ServerArgs)
                    sampling_backend_choices = set(SAMPLING_BACKEND_CHOICES)
                    if envs.SGLANG_TOKEN_ORACLE.get():
                        sampling_backend_choices.add("token_oracle")
                    parser.add_argument("--sampling-backend", type=str, choices=sampling_backend_choices,
                                        default=_declared_default("sampling_backend"), help="Sampling kernels.")
                    reasoning_parser_choices = _reasoning_parser_choices()
                    parser.add_argument("--reasoning-parser", type=str, choices=["auto"] + reasoning_parser_choices,
                                        default=_declared_default("reasoning_parser"), help="Reasoning parser.")
                    parser.add_argument("--config", type=str, help="A YAML file of options.")
                    parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction,
                                        new_flag="--cuda-graph-backend-decode=disabled",
                                        help="Deprecated. Use --cuda-graph-backend-decode=disabled instead.")


            def _declared_default(name):
                return None


            _INPUT_NAMESPACES = [Model, ExecGraph]
            """),
        "sglang/srt/environ.py": _code("""\
            class EnvField:
                def __init__(self, default, secret=False):
                    self.default = default


            class EnvBool(EnvField):
                pass


            class EnvInt(EnvField):
                pass


            class EnvStr(EnvField):
                pass


            class _DeprecatedEnvFallback:
                def __init__(self, default, deprecated_name, secret=False):
                    self.deprecated_name = deprecated_name


            class EnvIntWithAlias(_DeprecatedEnvFallback, EnvInt):
                pass


            class Envs:
                SGLANG_TOKEN_ORACLE = EnvBool(False)
                SGLANG_FLASHINFER_AUTOTUNE_CACHE = EnvBool(True)
                SGLANG_CHUNK = EnvIntWithAlias(4, deprecated_name="SGLANG_OLD_CHUNK")
                SGLANG_CACHE_DIR = EnvStr(lambda: "~/.cache/sglang")


            class _DeprecatedEnv:
                def __init__(self, replacement=None, note=None):
                    self.replacement = replacement


            _DEPRECATED_ENVS = {
                "SGLANG_RETIRED": _DeprecatedEnv(note="Please use '--retired-flag' instead."),
            }

            envs = Envs()
            """),
        "sglang/srt/layers/__init__.py": "",
        "sglang/srt/layers/direct.py": _code("""\
            import os

            from sglang.srt.utils import get_bool_env_var

            FAST = get_bool_env_var("SGLANG_DIRECT_READ", "true")
            PATH = os.getenv("SGLANG_DIRECT_PATH")
            """),
        "sglang/srt/speculative/__init__.py": "",
        "sglang/srt/speculative/spec_registry.py": '_RESERVED_ALIASES = frozenset({"NEXTN"})\n',
        "sglang/srt/speculative/spec_info.py": _code("""\
            from enum import Enum, auto


            class SpeculativeAlgorithm(Enum):
                EAGLE = auto()
                EAGLE3 = auto()
                NGRAM = auto()
                NONE = auto()
            """),
    }


def sglang_wheel(directory: Path, version: str = "9.0.0") -> Path:
    """An sglang-<version> wheel with the sources `engines add` reads, pinning FlashInfer and torch."""
    files = _sglang_sources()
    files[f"sglang-{version}.dist-info/METADATA"] = _metadata("sglang", version, [
        "aiohttp", "flashinfer_python[cu13]==0.6.18", "torch==2.13.0"])
    files[f"sglang-{version}.dist-info/WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n"
    return _zip(directory / f"sglang-{version}-cp311-cp311-manylinux_2_34_x86_64.whl", files)
