// The set of live handles of each type. A handle is registered when its object is constructed
// and unregistered when it is destroyed, so every entry point can tell a live handle from a
// destroyed, never-created or wrong-typed one WITHOUT reading the memory behind it (reading a
// freed object is undefined behaviour; a magic number can only guess). One set per handle type,
// each behind its own reader-writer lock: checks from many threads read concurrently, creation
// and destruction write.
//
// Limit: once a handle is destroyed its address may be handed out again by the allocator for a
// new object of the same type; a stale copy of the old handle then names the new object. No
// registry can tell those apart without changing the handle representation.
#pragma once

#include <mutex>
#include <shared_mutex>
#include <unordered_set>

namespace ptdp::capi {

/// The live objects of one handle type `Impl`.
template <typename Impl>
class HandleRegistry {
 public:
  static HandleRegistry& instance() {
    static HandleRegistry* r = new HandleRegistry;  // never destroyed: handles may outlive static teardown
    return *r;
  }
  void add(const void* p) {
    std::unique_lock lock(mutex_);
    live_.insert(p);
  }
  void remove(const void* p) {
    std::unique_lock lock(mutex_);
    live_.erase(p);
  }
  bool contains(const void* p) const {
    std::shared_lock lock(mutex_);
    return live_.count(p) != 0;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_set<const void*> live_;
};

/// A member of every handle object: registers the object for as long as it exists. Declare it
/// as `ptdp::capi::Registration<ptdp_x_impl> registration{this};`.
template <typename Impl>
class Registration {
 public:
  explicit Registration(const Impl* self) : self_(self) { HandleRegistry<Impl>::instance().add(self_); }
  ~Registration() { HandleRegistry<Impl>::instance().remove(self_); }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  const void* self_;
};

/// Whether `p` is a live object of handle type `Impl` (false for NULL).
template <typename Impl>
bool is_live(const Impl* p) {
  return p != nullptr && HandleRegistry<Impl>::instance().contains(p);
}

}  // namespace ptdp::capi
