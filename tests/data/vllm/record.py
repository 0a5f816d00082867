"""Write metrics-<vLLM version>.txt: the Prometheus text that vLLM's own metrics code exposes.

Not a scrape of a running server (there was no GPU): this feeds vLLM's PrometheusStatLogger
(`vllm/v1/metrics/loggers.py` of the vLLM wheel) with scheduler and iteration stats objects of the
same wheel, as its engine core would after serving a few requests, and writes what
`prometheus_client.generate_latest` gives for the registry the server's /metrics route serves
(`vllm.v1.metrics.prometheus.get_prometheus_registry`: prometheus_client's default REGISTRY when
PROMETHEUS_MULTIPROC_DIR is unset, which is so with the default --api-server-count 1).

Run it with a Python that has the vLLM wheel pinned in scripts/node/versions.env
(SERVING_VLLM_VERSION) installed, see SOURCES.md:
    python tests/data/vllm/record.py tests/data/vllm
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import prometheus_client
import vllm
from vllm.config import CacheConfig, ObservabilityConfig
from vllm.v1.engine import FinishReason
from vllm.v1.metrics.loggers import PrometheusStatLogger
from vllm.v1.metrics.prometheus import get_prometheus_registry
from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats, PrefixCacheStats, SchedulerStats

MODEL = "llama-3-1-8b"  # what --served-model-name would set


def stand_in_config() -> SimpleNamespace:
    """The parts of a VllmConfig the Prometheus logger reads (a real one needs the model's config.json)."""
    return SimpleNamespace(
        model_config=SimpleNamespace(served_model_name=MODEL, max_model_len=8192, is_diffusion=False),
        observability_config=ObservabilityConfig(),
        cache_config=CacheConfig(block_size=16, gpu_memory_utilization=0.9),
        speculative_config=None,
        kv_transfer_config=None,
        ec_transfer_config=None,
        lora_config=None,
        parallel_config=SimpleNamespace(pipeline_parallel_size=1, tensor_parallel_size=1),
    )


def feed(logger: PrometheusStatLogger) -> None:
    """Three finished requests and a busy last step: 2 running, 3 waiting, a quarter of the KV cache."""
    for step, (ttft, itls) in enumerate([(0.045, [0.011, 0.012, 0.013]), (0.180, [0.024, 0.031]), (1.2, [0.06])]):
        stats = IterationStats()
        stats.prompt_token_stats.computed = 128 * (step + 1)
        stats.prompt_token_stats.total = 128 * (step + 1)
        stats.num_generation_tokens = len(itls) + 1
        stats.time_to_first_tokens_iter = [ttft]
        stats.inter_token_latencies_iter = itls
        stats.n_params_iter = [1]
        stats.max_num_generation_tokens_iter = [len(itls) + 1]
        stats.finished_requests = [
            FinishedRequestStats(
                finish_reason=FinishReason.LENGTH if step == 2 else FinishReason.STOP,
                e2e_latency=ttft + sum(itls) + 0.002,
                num_prompt_tokens=128 * (step + 1),
                num_generation_tokens=len(itls) + 1,
                max_tokens_param=64,
                queued_time=0.001 * (step + 1),
                prefill_time=ttft * 0.8,
                inference_time=ttft * 0.8 + sum(itls),
                decode_time=sum(itls),
                mean_time_per_output_token=sum(itls) / len(itls),
            )
        ]
        scheduler = SchedulerStats(
            num_running_reqs=2,
            num_waiting_reqs=2,
            num_skipped_waiting_reqs=1,
            kv_cache_usage=0.25,
            prefix_cache_stats=PrefixCacheStats(requests=1, queries=128 * (step + 1), hits=16 * step),
        )
        logger.record(scheduler, stats, engine_idx=0)


def main(out_dir: Path) -> Path:
    logger = PrometheusStatLogger(stand_in_config(), engine_indexes=[0])  # type: ignore[arg-type]
    logger.log_engine_initialized()  # vllm:cache_config_info, as the engine logs at start
    feed(logger)
    out = out_dir / f"metrics-{vllm.__version__}.txt"
    out.write_bytes(prometheus_client.generate_latest(get_prometheus_registry()))
    return out


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)))
