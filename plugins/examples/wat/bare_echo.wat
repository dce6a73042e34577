;; Bare echo: the `echo` tool with no imports at all, the baseline of the runtime bench.
;;
;; It offers `echo` with the same schema as the Rust test plugin's (`{"text": string}`) and
;; answers ok(output(arguments)): the call's JSON text itself, unparsed, so a call costs the
;; guest almost nothing and what a bench measures is the host. Unlike the Rust echo (built
;; against WASI 0.2 by its standard library) it imports no WASI interface. Same ABI notes
;; as confirm.wat.
;;
;; Static memory map:
;;     8  describe's return area: (ptr, len) of list<tool-spec>      8 bytes
;;    16  the one tool-spec: name, description, parameters (3 x ptr,len) 24 bytes
;;    64  invoke's return area: result<outcome, tool-error>          24 bytes
;;   128..334  string bytes
;;  1024  start of the bump heap used by cabi_realloc
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))

  (data (i32.const 8) "\10\00\00\00" "\01\00\00\00")
  (data (i32.const 16)
    "\80\00\00\00" "\04\00\00\00"      ;; name        -> 128, 4
    "\90\00\00\00" "\20\00\00\00"      ;; description -> 144, 32
    "\c0\00\00\00" "\8e\00\00\00")     ;; parameters  -> 192, 142
  (data (i32.const 128) "echo")
  (data (i32.const 144) "Returns its arguments unchanged.")
  (data (i32.const 192)
    "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"description\":\"The text to return.\"}},\"required\":[\"text\"],\"additionalProperties\":false}")

  ;; ---- cabi_realloc: bump allocator ----------------------------------------
  ;; (old_ptr, old_size, align, new_size) -> ptr. The host calls it to copy
  ;; the call's strings into guest memory. Frees are ignored: every call gets
  ;; a fresh instance, so the heap never needs to shrink.
  (func $cabi_realloc (export "cabi_realloc")
    (param $old_ptr i32) (param $old_size i32) (param $align i32) (param $new_size i32)
    (result i32)
    (local $ptr i32) (local $end i32)
    ;; ptr = (heap + align - 1) & -align
    (local.set $ptr
      (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
               (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $ptr) (local.get $new_size)))
    ;; grow memory by whole 64 KiB pages when end passes its size
    (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (if (i32.eq (i32.const -1)
              (memory.grow
                (i32.shr_u
                  (i32.add (i32.sub (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
                           (i32.const 65535))
                  (i32.const 16))))
          (then unreachable))))
    (global.set $heap (local.get $end))
    ;; a real realloc keeps the old bytes (the ABI itself only passes old_ptr = 0)
    (if (local.get $old_ptr)
      (then
        (memory.copy (local.get $ptr) (local.get $old_ptr)
          (select (local.get $old_size) (local.get $new_size)
                  (i32.lt_u (local.get $old_size) (local.get $new_size))))))
    (local.get $ptr))

  ;; ---- describe: func() -> list<tool-spec> ---------------------------------
  (func (export "maestro:tool/tool@0.1.0#describe") (result i32)
    (i32.const 8))

  ;; ---- invoke: func(call: call) -> result<outcome, tool-error> -------------
  ;; ok(output(arguments)): the arguments string the host copied into this memory.
  (func (export "maestro:tool/tool@0.1.0#invoke")
    (param $call_id_ptr i32) (param $call_id_len i32)
    (param $job_id_ptr i32) (param $job_id_len i32)
    (param $movement_ptr i32) (param $movement_len i32)
    (param $tool_ptr i32) (param $tool_len i32)
    (param $args_ptr i32) (param $args_len i32)
    (param $has_resume i32) (param $resume_case i32)
    (param $payload_ptr i32) (param $payload_len i32)
    (result i32)
    (i32.store8 (i32.const 64) (i32.const 0))            ;; ok
    (i32.store8 (i32.const 68) (i32.const 0))            ;; outcome.output
    (i32.store (i32.const 72) (local.get $args_ptr))
    (i32.store (i32.const 76) (local.get $args_len))
    (i32.const 64))
)
