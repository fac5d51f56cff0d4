// The overhead floor (overhead_floor.bpf.c) shares nothing with user space: it has no maps and
// no events. This header exists because every program set has one (ebpf/CMakeLists.txt).
#pragma once
