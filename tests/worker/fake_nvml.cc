// A stand-in for the driver's libnvidia-ml.so.1 (built under that name for
// gpu_monitor_test): one GPU at PCI bus id 00000000:3B:00.0 with fixed
// readings and two pending Xid events, through the same C interface as
// NVML's, so that GpuMonitor's loading, reading and Xid handling run on a
// machine without a GPU.
#include <cstring>

namespace {
struct FakeDevice {
  int unused;
} g_device;
struct FakeEventSet {
  int delivered;
} g_events;
constexpr const char* kBusId = "00000000:3B:00.0";
}  // namespace

extern "C" {
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlEventData_t {
  void* device;
  unsigned long long event_type, event_data;
  unsigned int gpu_instance_id, compute_instance_id;
};

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 13 ? "Not Found" : "Unknown Error"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** device) {
  if (std::strcmp(id, kBusId) != 0) return 13;  // NVML_ERROR_NOT_FOUND
  *device = &g_device;
  return 0;
}
int nvmlDeviceGetName(void*, char* name, unsigned int length) {
  std::strncpy(name, "Fake GPU 80GB", length);
  return 0;
}
int nvmlDeviceGetUtilizationRates(void*, nvmlUtilization_t* u) {
  u->gpu = 87;
  u->memory = 40;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void*, nvmlMemory_t* m) {
  m->total = 85899345920ULL;
  m->used = 21474836480ULL;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void*, unsigned int* mw) {
  *mw = 412500;
  return 0;
}
int nvmlDeviceGetTemperature(void*, int sensor, unsigned int* c) {
  if (sensor != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *c = 61;
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void*, int type, int counter, unsigned long long* n) {
  if (counter != 0) return 2;  // the volatile counts are the ones asked for
  *n = type == 0 ? 3 : 0;
  return 0;
}
int nvmlEventSetCreate(void** set) {
  *set = &g_events;
  return 0;
}
int nvmlDeviceRegisterEvents(void*, unsigned long long types, void*) { return types == 0x8 ? 0 : 2; }
// Two Xid events (79, then 48), once; then none (NVML_ERROR_TIMEOUT).
int nvmlEventSetWait_v2(void*, nvmlEventData_t* data, unsigned int) {
  static const unsigned long long kXids[] = {79, 48};
  if (g_events.delivered >= 2) return 10;
  data->device = &g_device;
  data->event_type = 0x8;
  data->event_data = kXids[g_events.delivered++];
  return 0;
}
int nvmlEventSetFree(void*) { return 0; }
}
