#include "worker/base/gpu_monitor.h"

#include <dlfcn.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainyard {

// NVML's C interface, as nvml.h declares the parts used here (the types are
// part of the driver's stable ABI; the versioned names are the current ones).
namespace nvml_abi {
using Return = int;  // nvmlReturn_t: 0 is NVML_SUCCESS
constexpr Return kSuccess = 0;
constexpr Return kTimeout = 10;  // NVML_ERROR_TIMEOUT
using Device = void*;            // nvmlDevice_t
using EventSet = void*;          // nvmlEventSet_t
struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
struct EventData {
  Device device;
  unsigned long long event_type, event_data;
  unsigned int gpu_instance_id, compute_instance_id;
};
constexpr unsigned long long kXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
constexpr int kTemperatureGpu = 0;                     // NVML_TEMPERATURE_GPU
constexpr int kCorrected = 0, kUncorrected = 1;        // nvmlMemoryErrorType_t
constexpr int kVolatileEcc = 0;                        // nvmlEccCounterType_t
}  // namespace nvml_abi

class Nvml {
 public:
  static absl::StatusOr<std::shared_ptr<Nvml>> Load() {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return absl::UnavailableError(absl::StrCat("NVML is not available: ", dlerror()));
    auto n = std::shared_ptr<Nvml>(new Nvml(lib));
    std::string missing;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
    };
    get(n->init, "nvmlInit_v2");
    get(n->shutdown, "nvmlShutdown");
    get(n->error_string, "nvmlErrorString");
    get(n->by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    get(n->get_name, "nvmlDeviceGetName");
    get(n->utilization, "nvmlDeviceGetUtilizationRates");
    get(n->memory, "nvmlDeviceGetMemoryInfo");
    get(n->power, "nvmlDeviceGetPowerUsage");
    get(n->temperature, "nvmlDeviceGetTemperature");
    get(n->ecc, "nvmlDeviceGetTotalEccErrors");
    get(n->event_set_create, "nvmlEventSetCreate");
    get(n->register_events, "nvmlDeviceRegisterEvents");
    get(n->event_set_wait, "nvmlEventSetWait_v2");
    get(n->event_set_free, "nvmlEventSetFree");
    if (!missing.empty()) return absl::UnavailableError(absl::StrCat("libnvidia-ml.so.1 lacks ", missing));
    if (const nvml_abi::Return rc = n->init(); rc != nvml_abi::kSuccess) {
      return absl::UnavailableError(absl::StrCat("nvmlInit failed: ", n->error_string(rc)));
    }
    n->initialized_ = true;
    return n;
  }
  ~Nvml() {
    if (initialized_) shutdown();
    dlclose(lib_);
  }

  nvml_abi::Return (*init)();
  nvml_abi::Return (*shutdown)();
  const char* (*error_string)(nvml_abi::Return);
  nvml_abi::Return (*by_pci_bus_id)(const char*, nvml_abi::Device*);
  nvml_abi::Return (*get_name)(nvml_abi::Device, char*, unsigned int);
  nvml_abi::Return (*utilization)(nvml_abi::Device, nvml_abi::Utilization*);
  nvml_abi::Return (*memory)(nvml_abi::Device, nvml_abi::Memory*);
  nvml_abi::Return (*power)(nvml_abi::Device, unsigned int*);
  nvml_abi::Return (*temperature)(nvml_abi::Device, int, unsigned int*);
  nvml_abi::Return (*ecc)(nvml_abi::Device, int, int, unsigned long long*);
  nvml_abi::Return (*event_set_create)(nvml_abi::EventSet*);
  nvml_abi::Return (*register_events)(nvml_abi::Device, unsigned long long, nvml_abi::EventSet);
  nvml_abi::Return (*event_set_wait)(nvml_abi::EventSet, nvml_abi::EventData*, unsigned int);
  nvml_abi::Return (*event_set_free)(nvml_abi::EventSet);

 private:
  explicit Nvml(void* lib) : lib_(lib) {}
  void* lib_;
  bool initialized_ = false;
};

absl::StatusOr<std::unique_ptr<GpuMonitor>> GpuMonitor::Open(const std::string& pci_bus_id) {
  // One NVML per process: every monitor shares it.
  static std::mutex load_mu;
  static std::weak_ptr<Nvml> shared;
  std::shared_ptr<Nvml> nvml;
  {
    std::lock_guard<std::mutex> lock(load_mu);
    nvml = shared.lock();
    if (!nvml) {
      auto loaded = Nvml::Load();
      if (!loaded.ok()) return loaded.status();
      nvml = *loaded;
      shared = nvml;
    }
  }
  std::unique_ptr<GpuMonitor> m(new GpuMonitor());
  m->nvml_ = nvml;
  if (const nvml_abi::Return rc = nvml->by_pci_bus_id(pci_bus_id.c_str(), &m->device_); rc != nvml_abi::kSuccess) {
    return absl::NotFoundError(
        absl::StrCat("NVML has no GPU at PCI bus id ", pci_bus_id, ": ", nvml->error_string(rc)));
  }
  char name[96] = {};
  if (nvml->get_name(m->device_, name, sizeof(name)) == nvml_abi::kSuccess) m->name_ = name;
  // Xid events need the driver's event support (absent in some VMs): without
  // it the Xid counts stay 0.
  nvml_abi::EventSet set = nullptr;
  if (nvml->event_set_create(&set) == nvml_abi::kSuccess) {
    if (nvml->register_events(m->device_, nvml_abi::kXidCriticalError, set) == nvml_abi::kSuccess) {
      m->event_set_ = set;
    } else {
      nvml->event_set_free(set);
    }
  }
  return m;
}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (event_set_ != nullptr) nvml_->event_set_free(event_set_);
}

GpuReading GpuMonitor::Read() {
  GpuReading r;
  Nvml& n = *nvml_;
  nvml_abi::Utilization u{};
  if (n.utilization(device_, &u) == nvml_abi::kSuccess) r.utilization = u.gpu / 100.0;
  nvml_abi::Memory mem{};
  if (n.memory(device_, &mem) == nvml_abi::kSuccess) {
    r.memory_used_bytes = static_cast<int64_t>(mem.used);
    r.memory_total_bytes = static_cast<int64_t>(mem.total);
  }
  unsigned int milliwatts = 0;
  if (n.power(device_, &milliwatts) == nvml_abi::kSuccess) r.power_watts = milliwatts / 1000.0;
  unsigned int celsius = 0;
  if (n.temperature(device_, nvml_abi::kTemperatureGpu, &celsius) == nvml_abi::kSuccess) {
    r.temperature_celsius = celsius;
  }
  unsigned long long count = 0;
  if (n.ecc(device_, nvml_abi::kCorrected, nvml_abi::kVolatileEcc, &count) == nvml_abi::kSuccess) {
    r.ecc_corrected = static_cast<int64_t>(count);
  }
  if (n.ecc(device_, nvml_abi::kUncorrected, nvml_abi::kVolatileEcc, &count) == nvml_abi::kSuccess) {
    r.ecc_uncorrected = static_cast<int64_t>(count);
  }
  if (event_set_ != nullptr) {
    nvml_abi::EventData ev{};
    while (n.event_set_wait(event_set_, &ev, 0) == nvml_abi::kSuccess) {
      if (ev.event_type & nvml_abi::kXidCriticalError) {
        ++r.xid_errors;
        r.last_xid = static_cast<int64_t>(ev.event_data);
      }
    }
  }
  return r;
}

void GpuMonitor::StartSampling(std::chrono::milliseconds interval) {
  if (thread_.joinable()) return;
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      lock.unlock();
      GpuReading r = Read();
      lock.lock();
      pending_xids_ += r.xid_errors;
      if (r.xid_errors == 0) r.last_xid = latest_.last_xid;
      latest_ = r;
      wake_.wait_for(lock, interval, [this] { return stop_; });
    }
  });
}

GpuReading GpuMonitor::Latest() {
  std::lock_guard<std::mutex> lock(mu_);
  GpuReading r = latest_;
  r.xid_errors = std::exchange(pending_xids_, 0);
  return r;
}

void FillGpuNumbers(const GpuReading& r, StepMetrics* m) {
  m->gpu_utilization = r.utilization;
  m->gpu_memory_used_bytes = r.memory_used_bytes;
  m->gpu_memory_total_bytes = r.memory_total_bytes;
  m->gpu_power_watts = r.power_watts;
  m->gpu_temperature_celsius = r.temperature_celsius;
  m->gpu_ecc_corrected = r.ecc_corrected;
  m->gpu_ecc_uncorrected = r.ecc_uncorrected;
  m->gpu_xid_errors = r.xid_errors;
  m->gpu_last_xid = r.last_xid;
}

void GpuSink::OnStep(const StepMetrics& m) {
  GpuReading r = monitor_->Latest();
  if (r.memory_total_bytes < 0) {
    next_->OnStep(m);  // no sample yet
    return;
  }
  StepMetrics with = m;
  FillGpuNumbers(r, &with);
  next_->OnStep(with);
}

}  // namespace trainyard
