"""Where and when a benchmark ran: the header every results file starts with."""
import datetime
import platform
import subprocess

import torch
import triton


def record(command: str, timing: str) -> dict:
    """date, GPU, driver, CUDA, torch, triton and Python, with the command that ran and how it timed."""
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "gpu": torch.cuda.get_device_name(), "driver": driver, "cuda": torch.version.cuda,
            "torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "command": command, "timing": timing}
