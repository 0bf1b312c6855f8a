#pragma once
namespace CLI {
class App;
}
namespace gpuscope {
void register_trace(CLI::App& app);
}
