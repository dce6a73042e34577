;; Stamp: a tool that answers every call with its build stamp, `stamp-v000`, and
;; StampAsk, which first parks on a question and answers the stamp once resumed
;; (with anything): the version that answers a resumed call is the one it ran on.
;;
;; The hot-reload test and bench copy this component and patch the three digits
;; of the stamp in place (the bytes appear once, inside the data segment), which
;; makes as many versions as they like, each with its own content hash and its
;; own answer, without a toolchain at test time. Same ABI notes as confirm.wat.
;;
;; Static memory map:
;;     8  describe's return area: (ptr, len) of list<tool-spec>      8 bytes
;;    16  the two tool-specs: name, description, parameters (3 x ptr,len) 2 x 24 bytes
;;    64  invoke's return area: result<outcome, tool-error>          24 bytes
;;   128..440  string bytes
;;  1024  start of the bump heap used by cabi_realloc
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))

  (data (i32.const 8) "\10\00\00\00" "\02\00\00\00")
  (data (i32.const 16)
    "\80\00\00\00" "\05\00\00\00"      ;; name        -> 128, 5
    "\90\00\00\00" "\2e\00\00\00"      ;; description -> 144, 46
    "\c0\00\00\00" "\3e\00\00\00")     ;; parameters  -> 192, 62
  (data (i32.const 40)
    "\40\01\00\00" "\08\00\00\00"      ;; name        -> 320, 8
    "\50\01\00\00" "\31\00\00\00"      ;; description -> 336, 49
    "\c0\00\00\00" "\3e\00\00\00")     ;; parameters  -> 192, 62 (shared)
  (data (i32.const 128) "Stamp")                                           ;; 5
  (data (i32.const 144) "Tell which build of this plugin answers calls.")  ;; 46
  (data (i32.const 192)
    "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}") ;; 62
  (data (i32.const 256) "stamp-v000")                                      ;; 10
  (data (i32.const 272) "Which stamp?")                                    ;; 12
  (data (i32.const 320) "StampAsk")                                        ;; 8
  (data (i32.const 336) "Ask a question, then tell which build answers it.") ;; 49

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
  ;; The host routes only "Stamp" (5 bytes) and "StampAsk" (8 bytes) here, so the
  ;; tool name's length tells them apart. StampAsk without a resume parks on
  ;; ask("Which stamp?"); every other call answers ok(output("stamp-vNNN")).
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
    (if (i32.and (i32.eq (local.get $tool_len) (i32.const 8))
                 (i32.eqz (local.get $has_resume)))
      (then
        (i32.store8 (i32.const 68) (i32.const 1))        ;; outcome.park
        (i32.store8 (i32.const 72) (i32.const 0))        ;; park.ask
        (i32.store (i32.const 76) (i32.const 272))       ;; question ptr
        (i32.store (i32.const 80) (i32.const 12))        ;; question len
        (return (i32.const 64))))
    (i32.store8 (i32.const 68) (i32.const 0))            ;; outcome.output
    (i32.store (i32.const 72) (i32.const 256))           ;; stamp ptr
    (i32.store (i32.const 76) (i32.const 10))            ;; stamp len
    (i32.const 64))
)
