;; Confirm: the smallest real maestro tool plugin, written by hand in WAT.
;;
;; A core module implementing the component-model canonical ABI (wasm32,
;; UTF-8 strings) of world `plugin` in maestro:tool@0.1.0
;; (wit/since_v0.1.0). It imports nothing and exports interface `tool`.
;;
;; The tool asks the user to confirm before going on:
;;   invoke, resume = none         -> ok(park(ask("Shall I go on? Reply yes or no.")))
;;   resume = answered(text)       -> ok(output(text))   (the model reads the answer)
;;   resume = expired              -> ok(terminal(abort("Nobody confirmed in time.")))
;;   any other resume              -> err(tool-error{message: "...", retryable: false})
;; The host only routes calls whose `tool` is "Confirm" here, so there is no
;; string comparison, and the schema takes no arguments, so no JSON parsing.
;;
;; Built into a component by embedding the WIT metadata and running the
;; component encoder: the wit-component crate (`embed_component_metadata`
;; then `ComponentEncoder`) in the project's build, or with jco:
;;   jco parse confirm.wat -o core.wasm
;;   jco embed core.wasm --wit wit/since_v0.1.0 -n plugin -o embedded.wasm
;;   jco new embedded.wasm -o confirm.wasm
;; (see build.sh next to this file).
;;
;; Static memory map (everything below 1024 is fixed data, the heap follows):
;;     8  describe's return area: (ptr, len) of list<tool-spec>      8 bytes
;;    16  the one tool-spec: name, description, parameters (3 x ptr,len) 24 bytes
;;    64  invoke's return area: result<outcome, tool-error>          24 bytes
;;   128..372  string bytes (UTF-8, not NUL-terminated)
;;  1024  start of the bump heap used by cabi_realloc
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))

  ;; ---- static data -------------------------------------------------------
  ;; describe's return area: list ptr = 16, len = 1
  (data (i32.const 8) "\10\00\00\00" "\01\00\00\00")
  ;; tool-spec { name: string, description: string, parameters: string }
  ;; size 24, align 4; fields at +0, +8, +16, each (ptr: i32, len: i32)
  (data (i32.const 16)
    "\80\00\00\00" "\07\00\00\00"      ;; name        -> 128, 7
    "\90\00\00\00" "\28\00\00\00"      ;; description -> 144, 40
    "\c0\00\00\00" "\3e\00\00\00")     ;; parameters  -> 192, 62
  (data (i32.const 128) "Confirm")                                     ;; 7
  (data (i32.const 144) "Ask the user to confirm before going on.")    ;; 40
  (data (i32.const 192)
    "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}") ;; 62
  (data (i32.const 256) "Shall I go on? Reply yes or no.")             ;; 31
  (data (i32.const 288) "Nobody confirmed in time.")                   ;; 25
  (data (i32.const 320) "Confirm can only be resumed with answered or expired") ;; 52

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
  ;; The result flattens to 2 values (ptr, len) > MAX_FLAT_RESULTS = 1, so it
  ;; is returned through a return area: the function returns its address.
  (func (export "maestro:tool/tool@0.1.0#describe") (result i32)
    (i32.const 8))

  ;; ---- invoke: func(call: call) -> result<outcome, tool-error> -------------
  ;; Parameters. `call` flattens to
  ;;   5 strings (call-id, job-id, movement, tool, arguments) = 10 x i32
  ;;   option<resume> = 1 (none/some) + flat(resume)
  ;;     resume = 1 (case) + join of the payloads:
  ;;       string -> (i32, i32), list<subtask-result> -> (i32, i32) => 2 x i32
  ;;     so option<resume> = 1 + 1 + 2 = 4 x i32
  ;;   total 14 <= MAX_FLAT_PARAMS = 16: the record is passed FLAT, as 14 i32.
  ;;   (Were it spilled to memory, `call` would be: 5 strings at 0..40, option
  ;;   tag u8 at 40, resume tag u8 at 44, payload (ptr,len) at 48; size 56.)
  ;; resume cases: 0 answered(string) 1 approved 2 denied(string)
  ;;   3 logged-in(string) 4 subtasks-done(list) 5 expired.
  ;;
  ;; Result. result<outcome, tool-error> flattens to 1 + max(5, 3) = 6 values
  ;; > MAX_FLAT_RESULTS = 1, so it goes through a return area (here at 64):
  ;;   +0  u8  result tag: 0 ok, 1 err                 (payload align 4 -> +4)
  ;;   ok: outcome at +4
  ;;     +4  u8 outcome tag: 0 output, 1 park, 2 terminal (payload at +8)
  ;;     output(string)       : +8 ptr, +12 len
  ;;     park at +8: +8 u8 tag 0 ask 1 browser-login 2 tool-request 3 subtasks
  ;;                 payload at +12: ask(string) +12 ptr, +16 len
  ;;                 (login-request: 2 strings +12..+28; tool-request: 3 strings
  ;;                 +12..+36; subtasks list: +12 ptr, +16 len)
  ;;     terminal at +8: +8 u8 tag 0 complete 1 abort; string +12 ptr, +16 len
  ;;   err: tool-error at +4: message +4 ptr, +8 len; retryable u8 at +12
  ;;   sizes: park 16, terminal 12, outcome 20, tool-error 12, result 24.
  ;; Strings returned point into this module's memory; the host copies them.
  (func (export "maestro:tool/tool@0.1.0#invoke")
    (param $call_id_ptr i32) (param $call_id_len i32)
    (param $job_id_ptr i32) (param $job_id_len i32)
    (param $movement_ptr i32) (param $movement_len i32)
    (param $tool_ptr i32) (param $tool_len i32)
    (param $args_ptr i32) (param $args_len i32)
    (param $has_resume i32) (param $resume_case i32)
    (param $payload_ptr i32) (param $payload_len i32)
    (result i32)
    (i32.store8 (i32.const 64) (i32.const 0))            ;; ok (overwritten on err)
    ;; first call: ok(park(ask(question)))
    (if (i32.eqz (local.get $has_resume))
      (then
        (i32.store8 (i32.const 68) (i32.const 1))        ;; outcome.park
        (i32.store8 (i32.const 72) (i32.const 0))        ;; park.ask
        (i32.store (i32.const 76) (i32.const 256))       ;; question ptr
        (i32.store (i32.const 80) (i32.const 31))        ;; question len
        (return (i32.const 64))))
    ;; resumed with answered(text): ok(output(text)), the user's words verbatim
    (if (i32.eqz (local.get $resume_case))
      (then
        (i32.store8 (i32.const 68) (i32.const 0))        ;; outcome.output
        (i32.store (i32.const 72) (local.get $payload_ptr))
        (i32.store (i32.const 76) (local.get $payload_len))
        (return (i32.const 64))))
    ;; resumed with expired: ok(terminal(abort(reason)))
    (if (i32.eq (local.get $resume_case) (i32.const 5))
      (then
        (i32.store8 (i32.const 68) (i32.const 2))        ;; outcome.terminal
        (i32.store8 (i32.const 72) (i32.const 1))        ;; terminal.abort
        (i32.store (i32.const 76) (i32.const 288))       ;; reason ptr
        (i32.store (i32.const 80) (i32.const 25))        ;; reason len
        (return (i32.const 64))))
    ;; any other resume: err(tool-error{message, retryable: false})
    (i32.store8 (i32.const 64) (i32.const 1))            ;; err
    (i32.store (i32.const 68) (i32.const 320))           ;; message ptr
    (i32.store (i32.const 72) (i32.const 52))            ;; message len
    (i32.store8 (i32.const 76) (i32.const 0))            ;; retryable = false
    (i32.const 64))
)
