-- submit_many(<submit's 15 arguments>...) -> {1 | 0, ...}
-- `submit` for each job of a batch, in order, as one call: the lane's
-- numbers and each key's fields are read once and H is written once for
-- all of them (a 500-file batch: one call, not 500).
local n, done = 15, {}
for i = 0, #ARGV / n - 1 do
  done[i + 1] = (submit({unpack(ARGV, i * n + 1, i * n + n)}))
end
return done
