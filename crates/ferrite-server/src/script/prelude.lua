-- The sandbox every script runs in, set up once per interpreter.
-- Receives the real globals table and the server's hooks (`impl`), and
-- gives back the frozen globals scripts see.
--
-- Invariants: a script reads globals through a proxy it cannot write,
-- whose metatable it cannot change, and reading a global that does not
-- exist is an error; the libraries it sees are frozen the same way; a
-- `pcall` inside a script cannot swallow the error that stops a killed
-- script.
local G, impl = ...
local rawget, rawset, error, type, tostring, select = rawget, rawset, error, type, tostring, select
local real_setmetatable, real_pcall, real_xpcall = setmetatable, pcall, xpcall

-- Frozen proxies, each to the table it stands for.
local frozen = real_setmetatable({}, { __mode = "k" })

local function deny()
    error("Attempt to modify a readonly table", 2)
end

local function freeze(t)
    local mt = { __index = t, __newindex = deny }
    local view = real_setmetatable({}, { __index = mt, __newindex = deny, __metatable = false })
    frozen[view] = true
    mt.__metatable = view
    local proxy = real_setmetatable({}, mt)
    frozen[proxy] = t
    return proxy
end

-- Iterating a frozen table walks what it stands for.
local real_pairs, real_ipairs, real_next = pairs, ipairs, next
local function behind(t)
    local inner = frozen[t]
    if type(inner) == "table" then
        return inner
    end
    return t
end
G.pairs = function(t)
    return real_pairs(behind(t))
end
G.ipairs = function(t)
    return real_ipairs(behind(t))
end
G.next = function(t, k)
    return real_next(behind(t), k)
end

G.setmetatable = function(t, mt)
    if frozen[t] then
        error("Attempt to modify a readonly table", 2)
    end
    return real_setmetatable(t, mt)
end
G.rawset = function(t, k, v)
    if frozen[t] then
        error("Attempt to modify a readonly table", 2)
    end
    return rawset(t, k, v)
end

-- Compiled chunks (`string.dump` output) are refused: loading bytecode
-- can break the interpreter's memory safety.
local real_loadstring = loadstring
G.loadstring = function(s, name)
    if type(s) == "string" and s:byte(1) == 27 then
        return nil, "binary chunks are not allowed"
    end
    return real_loadstring(s, name)
end
G.load = nil

local function stop_or_pass(ok, ...)
    if not ok and impl.stopping() then
        error((...), 0)
    end
    return ok, ...
end
G.pcall = function(...)
    return stop_or_pass(real_pcall(...))
end
G.xpcall = function(...)
    return stop_or_pass(real_xpcall(...))
end

-- redis.call raises a failed command's error reply (a table, so that
-- `pcall(redis.call, ...)` hands the script `{err=...}`), with where in
-- the script it was called.
local R = impl.redis
R.call = function(...)
    local r, failed = impl.command(...)
    if failed then
        local _, where = real_pcall(error, "", 3)
        rawset(r, "where", where)
        error(r, 0)
    end
    return r
end
R.pcall = function(...)
    return (impl.command(...))
end
R.setresp = function(n)
    return impl.setresp(n)
end

local proxies = {}
for _, name in ipairs({ "string", "math", "table", "cjson", "cmsgpack", "bit", "os" }) do
    if G[name] ~= nil then
        proxies[name] = freeze(G[name])
    end
end
for name, p in pairs(proxies) do
    rawset(G, name, p)
end
rawset(G, "redis", freeze(R))
rawset(G, "server", rawget(G, "redis"))

local view = freeze(G)
rawset(G, "_G", view)
real_setmetatable(G, {
    __index = function(_, k)
        error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end,
    __newindex = deny,
})
-- For function libraries: their loading environment, frozen the same way.
impl.freeze = freeze
-- The runner: the script's result or its error, never a raise.
impl.run = function(f, ...)
    return real_pcall(f, ...)
end
return view
