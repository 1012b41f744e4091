#!/bin/sh
# The fp16 session cache against ONNX Runtime fed the same fp16-rounded past (tests/ort/kv-type.sh).
KV_TYPE=f16
KV_FACTOR=1
. "$QD_SRCDIR/tests/ort/kv-type.sh"
