#include "scheduler/loop_api.h"

#include "kube/url.h"

namespace gpuslice::scheduler {
namespace {

class ClientApi final : public LoopApi {
 public:
  explicit ClientApi(std::shared_ptr<kube::Client> client) : client_(std::move(client)) {}

  Task<kube::ApiResult<Object>> patch_pod(std::string ns, std::string name, std::string merge_patch) override {
    co_return co_await client_->patch(kube::object_path(kube::resources::pods(), ns, name), kube::PatchType::merge,
                                      std::move(merge_patch));
  }
  Task<kube::ApiResult<Object>> patch_claim(std::string ns, std::string name, std::string merge_patch) override {
    // A named local, not a braced temporary inside the co_await (g++-12 destroys those twice; kube/client.h).
    const kube::Resource claims{"", "v1", "persistentvolumeclaims", true};
    std::string path = kube::object_path(claims, ns, name);
    co_return co_await client_->patch(std::move(path), kube::PatchType::merge, std::move(merge_patch));
  }
  Task<kube::ApiResult<Object>> patch_volume(std::string name, std::string merge_patch) override {
    const kube::Resource volumes{"", "v1", "persistentvolumes", false};
    std::string path = kube::object_path(volumes, "", name);
    co_return co_await client_->patch(std::move(path), kube::PatchType::merge, std::move(merge_patch));
  }
  Task<kube::ApiResult<Object>> patch_node(std::string name, std::string merge_patch) override {
    co_return co_await client_->patch(kube::object_path(kube::resources::nodes(), "", name), kube::PatchType::merge,
                                      std::move(merge_patch));
  }
  Task<kube::ApiResult<Object>> json_patch_node(std::string name, std::string json_patch) override {
    co_return co_await client_->patch(kube::object_path(kube::resources::nodes(), "", name), kube::PatchType::json,
                                      std::move(json_patch));
  }
  Task<kube::ApiResult<Object>> get_pod(std::string ns, std::string name) override {
    co_return co_await client_->get(kube::object_path(kube::resources::pods(), ns, name));
  }
  Task<kube::ApiResult<Object>> get_node(std::string name) override {
    co_return co_await client_->get(kube::object_path(kube::resources::nodes(), "", name));
  }
  Task<kube::ApiStatus> bind(std::string ns, std::string name, std::string node, std::string uid,
                             kube::BindingMetadata metadata) override {
    co_return co_await client_->bind_pod(std::move(ns), std::move(name), std::move(node), std::move(uid),
                                         std::move(metadata));
  }
  Task<kube::ApiResult<Object>> patch_condition(std::string ns, std::string name,
                                                kube::PodCondition condition) override {
    co_return co_await client_->patch_pod_condition(std::move(ns), std::move(name), std::move(condition));
  }
  Task<kube::ApiResult<Object>> create_event(kube::EventRecord event) override {
    co_return co_await client_->create_event(std::move(event));
  }
  Task<kube::ApiResult<Object>> patch_event(std::string ns, std::string name, std::string merge_patch) override {
    std::string path = kube::object_path(kube::resources::events(), ns, name);
    co_return co_await client_->patch(std::move(path), kube::PatchType::merge, std::move(merge_patch));
  }
  Task<kube::ApiResult<Object>> patch_pod_status(std::string ns, std::string name, std::string merge_patch) override {
    std::string path = kube::object_path(kube::resources::pods(), ns, name) + "/status";
    co_return co_await client_->patch(std::move(path), kube::PatchType::merge, std::move(merge_patch));
  }
  Task<kube::ApiStatus> remove_pod(std::string ns, std::string name, std::string uid) override {
    kube::DeleteOptions options;
    options.precondition_uid = std::move(uid);
    std::string path = kube::object_path(kube::resources::pods(), ns, name);
    co_return co_await client_->remove(std::move(path), std::move(options));
  }

 private:
  std::shared_ptr<kube::Client> client_;
};

}  // namespace

std::shared_ptr<LoopApi> make_client_api(std::shared_ptr<kube::Client> client) {
  return std::make_shared<ClientApi>(std::move(client));
}

}  // namespace gpuslice::scheduler
