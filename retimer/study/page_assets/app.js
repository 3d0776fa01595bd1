// retimer's hosted study page: the participant's side (retimer/proxy/study_page.py serves it).
(function(){
var S=null,busy=false,main=document.getElementById('main'),foot=document.getElementById('foot'),
st=document.getElementById('status'),input=document.getElementById('text'),
send=document.getElementById('send'),next=document.getElementById('next');
function say(t){st.textContent=t||'';}
function esc(t){return String(t).replace(/&/g,'&amp;').replace(/</g,'&lt;').replace(/>/g,'&gt;').replace(/"/g,'&quot;');}
var mk=new marked.Marked({gfm:true,breaks:false});
mk.use({renderer:{
 html:function(token){return esc(token.text);},  // raw HTML from the model shows as text
 code:function(token){var lang=(token.lang||'').split(/\s+/)[0].toLowerCase(),body=esc(token.text);
  if(lang&&window.hljs&&hljs.getLanguage(lang)){try{body=hljs.highlight(token.text,{language:lang,ignoreIllegals:true}).value;}catch(e){}}
  return '<pre><code class="hljs">'+body+'</code></pre>\n';},
 link:function(token){return this.parser.parseInline(token.tokens);},  // no way off the page
 image:function(token){return '<span class="note">[image: '+esc(token.text||'')+']</span>';}}});
function md(src){return mk.parse(src||'');}
function api(path,body){return fetch('api/'+path,{method:body===undefined?'GET':'POST',
 headers:{'Content-Type':'application/json','Accept':'application/json'},credentials:'same-origin',
 body:body===undefined?undefined:JSON.stringify(body)});}
// a 503 is the study's state briefly away (nothing was taken): wait, say so, and ask again
var PAUSES=[1000,2000,4000,8000,15000];
function retrying(path,body){var n=0;
 function attempt(){return api(path,body).then(function(r){
  if(r.status!==503){if(n)say('');return r;}
  var ms=PAUSES[Math.min(n,PAUSES.length-1)];n++;
  say('The study is briefly unavailable. Trying again in '+Math.round(ms/1000)+' s: please keep this page open.');
  return new Promise(function(ok){setTimeout(ok,ms);}).then(attempt);});}
 return attempt();}
function err(r){return r.json().then(function(j){return (j.error&&(j.error.message||j.error))||('Error '+r.status);},
 function(){return 'Error '+r.status;});}
function load(){return retrying('state').then(function(r){if(!r.ok)return err(r).then(function(e){say(e);});
 return r.json().then(function(j){S=j;render();});}).catch(function(){say('No connection: retrying...');setTimeout(load,2000);});}
function bubble(role,html,id){var d=document.createElement('div');d.className='msg '+role;
 d.innerHTML='<div class="b"'+(id?' id="'+id+'"':'')+'>'+html+'</div>';main.appendChild(d);return d.firstChild;}
function scaleHTML(s){var h='<fieldset><legend>'+esc(s.name.charAt(0).toUpperCase()+s.name.slice(1))+'</legend><div class="scale"><span class="end">'+esc(s.low)+'</span>';
 for(var n=1;n<=7;n++)h+='<label><input type="radio" name="'+s.name+'" value="'+n+'" aria-label="'+esc(s.name)+' '+n+'"><span class="n">'+n+'</span></label>';
 return h+'<span class="end hi">'+esc(s.high)+'</span></div></fieldset>';}
function rateForm(turn){var f=document.createElement('form');f.className='rate';f.id='rate';
 var h='<div>Please rate this response.</div>';S.scales.forEach(function(s){h+=scaleHTML(s);});
 if(S.slow_question)h+='<fieldset><legend>Did this response feel slow?</legend><div class="scale">'+
  '<label><input type="radio" name="slow" value="yes"><span class="n wide">Yes</span></label>'+
  '<label><input type="radio" name="slow" value="no"><span class="n wide">No</span></label></div></fieldset>';
 f.innerHTML=h+'<button type="submit" id="save">Save rating</button>';
 f.addEventListener('submit',function(e){e.preventDefault();var scores={},missing=[];
  S.scales.forEach(function(s){var c=f.querySelector('input[name="'+s.name+'"]:checked');if(c)scores[s.name]=+c.value;else missing.push(s.name);});
  var slow=f.querySelector('input[name="slow"]:checked');
  if(S.slow_question&&!slow)missing.push('slow');
  if(missing.length){say('Please answer: '+missing.join(', ')+'.');return;}
  retrying('rate',{turn:turn,scores:scores,slow:slow?slow.value==='yes':null}).then(function(r){
   if(r.ok){say('Rating saved. Thank you.');return load();}
   return err(r).then(function(e){say(e);return load();});}).catch(function(){say('Not saved: no connection. Try again.');});});
 main.appendChild(f);}
function render(){main.innerHTML='';document.title=S.title;document.getElementById('title').textContent=S.title;
 if(!S.consented){foot.hidden=true;var c=document.createElement('div');c.className='consent';
  c.innerHTML=md(S.consent||'')+'<p><button id="agree">I agree, start</button></p>';main.appendChild(c);
  document.getElementById('agree').onclick=function(){retrying('consent',{}).then(function(r){
   if(r.ok)return load();return err(r).then(function(e){var p=document.createElement('p');p.className='note';p.textContent=e;c.appendChild(p);});});};return;}
 if(S.finished){foot.hidden=true;var d=document.createElement('div');d.className='done';
  d.innerHTML='<h2>Thank you!</h2>'+(S.code?'<p>Your completion code:</p><p><span class="code" id="code">'+esc(S.code)+'</span></p>':'<p>You have finished.</p>')+
  (S.redirect?'<p><a id="back" href="'+esc(S.redirect)+'">Return to the study site</a> (in a few seconds by itself)</p>':'');
  main.appendChild(d);if(S.redirect&&/^https:\/\//.test(S.redirect))setTimeout(function(){location.href=S.redirect;},5000);return;}
 foot.hidden=false;var t=document.createElement('div');t.className='task';
 t.innerHTML='<b>Task '+(S.task+1)+' of '+S.tasks.length+'</b>'+md(S.tasks[S.task]);main.appendChild(t);
 var waiting=false,last=null;
 S.turns.filter(function(x){return x.task===S.task;}).forEach(function(x){
  bubble('user',esc(x.message));
  if(x.status==='pending'){bubble('assistant','<span class="note">The response is still coming in...</span>');waiting=true;}
  else if(x.status==='broken'){bubble('assistant',(x.reply?md(x.reply):'')+'<p class="note">This response was interrupted. Please send your message again.</p>');}
  else bubble('assistant',md(x.reply));last=x;});
 var rated=S.turns.filter(function(x){return x.task===S.task&&x.rated;}).length;
 if(last&&last.status==='done'&&!last.rated)rateForm(last.turn);
 var mustRate=!!document.getElementById('rate');
 // a task's fixed first message: shown in the box, sent as is, until a reply to it has come
 var fixed=S.prompts&&S.prompts[S.task],answered=S.turns.some(function(x){return x.task===S.task&&x.status==='done';});
 if(fixed&&!answered){input.value=fixed;input.readOnly=true;}else if(input.readOnly){input.value='';input.readOnly=false;}
 send.disabled=busy||waiting||mustRate;input.disabled=send.disabled;
 next.hidden=rated<S.turns_needed;next.textContent=S.task+1<S.tasks.length?'Next task':'Finish';
 if(waiting&&!busy)setTimeout(load,2000);
 window.scrollTo(0,document.body.scrollHeight);}
function deltaOf(obj){if(obj.choices&&obj.choices[0]&&obj.choices[0].delta)return obj.choices[0].delta.content||'';
 if(obj.type==='content_block_delta'&&obj.delta&&obj.delta.type==='text_delta')return obj.delta.text||'';return '';}
function chat(text){busy=true;send.disabled=true;input.disabled=true;say('');
 bubble('user',esc(text));var out=bubble('assistant','<span class="note">...</span>'),acc='';
 retrying('chat',{text:text}).then(function(r){
  if(!r.ok)return err(r).then(function(e){say(e);busy=false;return load();});
  var reader=r.body.getReader(),dec=new TextDecoder(),buf='';
  function pump(){return reader.read().then(function(x){
   if(x.done){busy=false;return load();}
   buf+=dec.decode(x.value,{stream:true});var parts=buf.split('\n');buf=parts.pop();
   parts.forEach(function(line){if(line.indexOf('data:')!==0)return;var data=line.slice(5).trim();
    if(!data||data==='[DONE]')return;try{acc+=deltaOf(JSON.parse(data));}catch(e){}});
   out.innerHTML=md(acc)||'<span class="note">...</span>';window.scrollTo(0,document.body.scrollHeight);return pump();});}
  return pump();}).catch(function(){busy=false;say('The connection dropped: the page will show what arrived.');setTimeout(load,1000);});}
document.getElementById('f').addEventListener('submit',function(e){e.preventDefault();
 var text=input.value.trim();if(!text||busy)return;input.value='';chat(text);});
input.addEventListener('keydown',function(e){if(e.key==='Enter'&&!e.shiftKey){e.preventDefault();
 document.getElementById('f').requestSubmit();}});
next.addEventListener('click',function(){retrying('next',{}).then(function(r){
 if(r.ok){say('');return load();}return err(r).then(function(e){say(e);return load();});});});
load();
})();
